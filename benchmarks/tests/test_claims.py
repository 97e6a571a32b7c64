"""The claims harness and its subcommands (benchmarks/claims.py): the plans, run keys, the cache, STS-only records,
one variant syntax, both probes from one embedding cache, machine, date and commit in every record, bad input."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from benchmarks import claims, claims_report


@pytest.fixture
def recipe(monkeypatch, tmp_path):
    """main() sets the precision and thread count of the harness's module-level recipe: keep that to the test."""
    import torch

    monkeypatch.setattr(claims, "BACKBONES", copy.deepcopy(claims.BACKBONES))
    monkeypatch.setattr(claims, "COMMON", dict(claims.COMMON))
    monkeypatch.setattr(claims, "CACHE", tmp_path / "cache")
    return ["--threads", str(torch.get_num_threads())]


def record(spec, transfer: bool) -> dict:
    return {"backbone": spec.backbone, "preset": spec.preset, "seed": spec.seed, "lam": spec.lam,
            "steps": spec.steps, "mode": "test", "eval_precision": spec.eval_precision,
            "sts": {"avg": 80.0}, "transfer": {"MR": 75.0, "avg": 83.0} if transfer else None}


def test_plan_pairs_presets_by_seed_and_puts_extras_where_they_bind():
    jobs = claims.plan(["standin", "minilm"], ["simcse", "mixcse", "mixcse-single"], [0, 1], True,
                       None, "bf16", transfer=False)
    assert jobs[:6] == [("baseline", "minilm-raw")] + jobs[1:5] + [("baseline", "glove")]
    assert [(r.backbone, r.preset, r.seed) for _, r in jobs[1:5]] == [
        ("minilm", "simcse", 0), ("minilm", "mixcse", 0), ("minilm", "simcse", 1), ("minilm", "mixcse", 1)]
    runs = [j for kind, j in jobs if kind == "run"]
    assert [(r.backbone, r.preset, r.lam) for r in runs if r.seed == 0][-6:] == [
        ("standin", "mixcse-bound", 0.2), ("minilm", "mixcse", 0.5), ("minilm", "mixcse-released", 0.2),
        ("minilm", "mixcse", 0.1), ("minilm", "mixcse", 0.3), ("minilm", "mixcse-bound", 0.2)]
    assert all(not r.transfer for r in runs) and len(runs) == 2 * (3 + 3 + 6)
    assert [j for j in jobs if j[0] == "baseline"] == [("baseline", n) for n in (
        "minilm-raw", "glove", "standin-raw-cls", "standin-raw-avg", "minilm-raw-fp32")]


def test_a_run_recorded_without_transfer_is_still_to_do_for_a_job_that_wants_it(tmp_path, monkeypatch):
    full = claims.make_spec("minilm", "mixcse:0.5", 0, None, "bf16")
    sts_only = claims.make_spec("minilm", "mixcse:0.5", 0, None, "bf16", transfer=False)
    assert full.key == sts_only.key and full.name == sts_only.name  # same run directory: weights are reused
    data = {"runs": [record(full, transfer=False)],
            "baselines": [{"name": "glove", "mode": "test", "eval_precision": "bf16"}]}
    jobs = [("run", full), ("baseline", "glove"), ("baseline", "minilm-raw")]
    assert claims.pending_jobs(jobs, data, "bf16") == [("run", full), ("baseline", "minilm-raw")]
    assert claims.pending_jobs([("run", sts_only)], data, "bf16") == []
    data["runs"] = [record(full, transfer=True)]
    assert claims.pending_jobs([("run", full)], data, "bf16") == []
    res = {"sts": {"STS12": {"spearman": 70.0}, "avg": 70.0},
           "analysis": {"alignment": 0.3, "uniformity": -2.0, "max_angle": 100.0, "mean_angle": 60.0,
                        "mean_cosine": 0.4},
           "settings": {"mode": "test", "classifier": "sklearn", "batch_size": 128, "seconds": {}}}
    out = claims.summarise_eval(res)  # an STS-only evaluation: no transfer row in the tables
    assert out["transfer"] is None and out["mrpc_f1"] is None and out["sts"] == {"STS12": 70.0, "avg": 70.0}
    stamp = {"machine": {"cpu": "Some CPU"}, "date": "2026-01-01"}
    (tmp_path / "r.json").write_text(json.dumps({"runs": [{**record(sts_only, False), **out, **stamp}]}))
    monkeypatch.setattr(claims_report, "RESULTS", tmp_path)
    tables = claims_report.tasks(("r.json",))
    assert "| MixCSE λ=0.5 | Some CPU | 1 | 70.00 |" in tables and "Transfer" not in tables


def test_the_table_and_the_gpu_probe_build_configs_from_one_variant_syntax(tmp_path):
    from mixcse.training.config import build_config

    base = {"model": "m", "train_file": "c.txt", "data_dir": "d", "max_steps": 200}
    half = build_config(claims.train_config(base, "mixcse:0.5", 3, str(tmp_path)))
    default = build_config(claims.train_config(base, "mixcse", 3, str(tmp_path)))
    assert half.objective().lam == 0.5 and default.objective().lam == 0.2 and half.seed == default.seed == 3
    assert build_config(claims.train_config(base, "simcse", 0, str(tmp_path))).objective().lam is None
    table = claims.make_spec("minilm", "mixcse:0.3", 1, None, "bf16").config()
    assert table["lam"] == 0.3 and table["loss"] == "mixcse" and table["seed"] == 1 and table["max_steps"] == 200
    assert table["save_candidates"] is True  # training_best needs every scored checkpoint
    assert "lam" not in claims.make_spec("minilm", "mixcse", 1, None, "bf16").config()  # the preset's own
    assert claims.split_values(["0,1", "2"]) == ["0", "1", "2"] == claims.split_values("0,1,2")


def test_the_table_evaluates_the_best_checkpoint_of_training_not_the_start_model():
    records = [{"step": 0, "stsb_dev": 30.0}, {"step": 5, "loss": 1.0}, {"step": 25, "stsb_dev": 28.0},
               {"step": 50, "stsb_dev": 29.0}, {"step": 75, "stsb_dev": 29.0}]
    assert claims.training_best(records) == (50, 29.0)  # the start scores higher; the earliest of a tie wins


def test_a_baseline_records_both_probes_from_one_embedding_cache(monkeypatch, tmp_path):
    import mixcse.evaluation

    seen, loaded = [], []

    def evaluate_timed(encoder, tasks, classifier, cache_dir, workers, precision, **kwargs):
        seen.append((classifier, encoder, precision, cache_dir, workers))
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        transfer = {"MR": {"acc": 76.0}, "MRPC": {"acc": 70.0, "f1": 80.0}, "avg": 73.0}
        if classifier == claims.PYTORCH_PROBE:
            return {"transfer": transfer | {"MR": {"acc": 75.0}}, "settings": {"classifier": {"lr": 1e-3}}}, 3.0
        return {"sts": {"STS12": {"spearman": 70.0}, "avg": 70.0}, "transfer": transfer,
                "analysis": {"alignment": 0.3, "uniformity": -2.0, "max_angle": 100.0, "mean_angle": 60.0,
                             "mean_cosine": 0.4},
                "settings": {"mode": "test", "classifier": "sklearn", "batch_size": 128, "seconds": {}}}, 10.0

    monkeypatch.setattr(claims, "CACHE", tmp_path)
    monkeypatch.setattr(claims, "baseline_encoder", lambda name, precision="fp32": loaded.append(precision) or name)
    monkeypatch.setattr(mixcse.evaluation.STSEvaluator, "__call__", lambda self, enc, **kw: {"spearman": 80.0})
    monkeypatch.setattr(claims, "evaluate_timed", evaluate_timed)
    out = claims.run_baseline("minilm-raw", "bf16", workers=2)
    assert loaded == ["fp32", "bf16"]  # STS-B dev in fp32, as the trainer selects; the evaluation in bf16
    assert [s[0] for s in seen] == ["sklearn-converged", claims.PYTORCH_PROBE] and seen[0][1:] == seen[1][1:]
    assert seen[0][2] == "bf16" and not seen[0][3].exists()  # the shared embedding cache is deleted afterwards
    assert out["transfer"] == {"MR": 76.0, "MRPC": 70.0, "avg": 73.0} and out["mrpc_f1"] == 80.0
    assert out["transfer_pytorch"]["MR"] == 75.0 and out["mrpc_f1_pytorch"] == 80.0
    assert out["pytorch_probe"]["eval_workers"] == 2 and out["eval_seconds"] == 13.0 and out["stsb_dev"] == 80.0


def test_the_fp32_table_trains_and_evaluates_in_fp32(tmp_path, capsys, recipe):
    args = ["paper", "--precision", "fp32", "--backbones", "standin", "--presets", "simcse", "--seeds", "0",
            "--dry-run", "--no-baselines", "--results", str(tmp_path / "r.json")]
    assert claims.main(args + recipe) == 0
    assert "to do  standin-simcse-lamnone-s0-n250-test-fp32" in capsys.readouterr().out
    spec = claims.make_spec("standin", "simcse", 0, None, "fp32")
    assert spec.config()["precision"] == "fp32" and not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("args, message", [
    (["paper", "--presets", "simcse,nope"], "unknown variant 'nope'"),
    (["paper", "--presets", "mixcse:x"], "unknown variant 'mixcse:x'"),
    (["paper", "--backbones", "bert"], "unknown backbone 'bert'"),
    (["steps", "--presets", "simcse", "mixcse:x"], "unknown variant 'mixcse:x'"),
    (["steps", "--seeds", "0,one"], "--seeds takes whole numbers"),
    (["steps", "--jobs", "0"], "must be >= 1"),
    (["paper", "--steps", "0"], "must be >= 1"),
    (["paper", "--eval-workers", "0"], "must be >= 1"),
    (["paper", "--seeds", "0,x"], "--seeds takes whole numbers"),
])
def test_bad_input_is_one_error_line_before_anything_runs(tmp_path, capsys, recipe, args, message):
    out = tmp_path / "out.json"
    paths = (["--model", "m", "--corpus", "c", "--data", "d", "--out", str(out)] if args[0] == "steps"
             else ["--results", str(out), "--dry-run"])
    with pytest.raises(SystemExit) as stop:
        claims.main(args + paths + (recipe if args[0] != "steps" else []))
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and err[-1].startswith("python -m benchmarks.claims: error:") and message in err[-1]
    assert not out.exists()


def test_the_gpu_probe_writes_every_run_with_its_settings(tmp_path, monkeypatch, capsys):
    def probe_run(base, variant, seed):
        assert base["max_steps"] == 20 and base["eval_steps"] == 5 and base["pooler"] == "cls"
        avg = 79.0 + seed + (0.5 if variant == "mixcse" else 0.0)
        return {"preset": variant, "seed": seed, "steps": 20, "best_step": 10, "raw_dev": 80.0, "best_dev": 81.0,
                "sts": {t: avg for t in claims_report.STS_TASKS} | {"avg": avg}, "train_seconds": 1.0}

    monkeypatch.setattr(claims, "probe_run", probe_run)
    out = tmp_path / "probe.json"
    assert claims.main(["steps", "--model", "m", "--corpus", "c", "--data", "d", "--out", str(out), "--steps", "20",
                        "--eval-steps", "5", "--pooler", "cls", "--seeds", "0,1", "2"]) == 0
    probe = json.loads(out.read_text())
    recorded = json.loads((claims.RESULTS / "seeds_probe_gpu.json").read_text())["settings"]
    assert probe["settings"].keys() == recorded.keys() and probe["settings"]["seeds"] == [0, 1, 2]
    assert [(r["seed"], r["preset"]) for r in probe["runs"]][:2] == [(0, "simcse"), (0, "mixcse")]
    assert probe["machine"]["cpu"] and probe["date"] and probe["commit"] and probe["precision"] == "auto"
    assert "6 runs in" in capsys.readouterr().out
