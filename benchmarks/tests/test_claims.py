"""The claims harness and its subcommands (benchmarks/claims.py): the plans, run keys, the cache, STS-only records,
one variant syntax, both probes from one embedding cache, the batch study's pairing and reuse, bad input."""

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


def test_a_run_recorded_without_transfer_is_still_to_do_for_a_job_that_wants_it():
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
    data = {"runs": [{**record(sts_only, transfer=False), **out}], "baselines": []}
    assert any("λ=0.5" in row for row in claims_report.task_table(data, "minilm", "sts"))
    assert not any("λ=0.5" in row for row in claims_report.task_table(data, "minilm", "transfer"))


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
    monkeypatch.setattr(mixcse.evaluation, "stsb_dev_spearman", lambda enc, data_dir: 80.0)
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
    (["batch", "--batch-sizes", "64,500"], "batch size 500: above 64, the cached step needs a multiple of 64"),
    (["batch", "--steps", "0"], "must be >= 1"),
    (["batch", "--eval-workers", "0"], "must be >= 1"),
    (["batch", "--reuse-from", "missing.json"], "--reuse-from missing.json: no such file"),
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
    assert "- MixCSE − SimCSE: STS avg +0.50 ± 0.00 (n=3); better on 3/3 seeds" in capsys.readouterr().out


def test_every_batch_size_reads_about_the_same_sentences_and_only_larger_ones_are_cached():
    jobs = claims.batch_plan(["minilm", "standin"], ["mixcse", "mixcse:0.2"], [0], [64, 512, 2048], "fp32", False)
    got = [(j.backbone, j.batch_size, j.steps, j.eval_steps, j.mini_batch_size) for j in jobs]
    assert got == [("standin", 64, 250, 25, None), ("standin", 512, 31, 3, 64), ("standin", 2048, 8, 1, 64),
                   ("minilm", 64, 200, 25, None), ("minilm", 512, 25, 3, 64), ("minilm", 2048, 6, 1, 64)]
    # batch 64 is the claims table's own run: its key and folder name are the ones records already have
    assert jobs[3].key == ("minilm", "mixcse", 0, 0.2, 200, "fp32", 64) == claims.run_key(record(jobs[3], False))
    assert jobs[3].name == "minilm-mixcse-lam0.2-s0-n200-test-fp32"
    assert jobs[4].name == "minilm-mixcse-lam0.2-s0-n25-b512-test-fp32" and jobs[4].key[-1] == 512
    assert claims.run_key({**record(jobs[4], False), "batch_size": 512}) == jobs[4].key
    from mixcse.training.config import build_config

    built = build_config(jobs[4].config())
    assert built.batch_size == 512 and built.mini_batch_size == 64 and built.max_steps == 25 and built.eval_steps == 3
    assert "mini_batch_size" not in jobs[3].config() and jobs[3].config()["batch_size"] == 64


def _run(seed: int, batch: int, sts: float, precision: str = "fp32", steps: int | None = None) -> dict:
    r = {"backbone": "standin", "preset": "mixcse", "seed": seed, "lam": 0.2,
         "steps": steps or claims.equal_sentences(250, batch), "mode": "test", "eval_precision": precision,
         "sts": {"avg": sts}, "transfer": None, "best_dev": 30.0, "best_step": 25, "train_seconds": 100.0}
    return r if batch == 64 else {**r, "batch_size": batch}  # claims records carry no batch size


def test_the_batch_summary_pairs_each_batch_with_batch_64_of_the_same_precision_and_budget():
    data = {"runs": [_run(0, 64, 27.0), _run(1, 64, 26.0), _run(0, 512, 27.5), _run(1, 512, 27.5),
                     _run(2, 512, 20.0),  # seed 2 has no batch-64 run: not paired
                     _run(0, 64, 10.0, "bf16"), _run(0, 512, 11.0, "bf16"),  # another precision: its own rows
                     _run(0, 64, 5.0, steps=10), _run(0, 512, 9.0, steps=10)]}  # --steps 10: equal steps
    rows = {(r["eval_precision"], r["batch_size"], r["steps"]): r for r in claims.batch_summary(data)}
    assert rows["fp32", 64, 250]["sts_avg_minus_batch64"] == [] and rows["fp32", 64, 250]["n"] == 2
    big = rows["fp32", 512, 31]
    assert big["sts_avg_minus_batch64"] == [0.5, 1.5] and big["sts_avg_minus_batch64_mean"] == 1.0
    assert big["n"] == 3 and big["sentences"] == 512 * 31 and "better on 2/2 seeds" in big["sts_avg_minus_batch64_text"]
    assert rows["bf16", 512, 31]["sts_avg_minus_batch64"] == [1.0]
    assert rows["fp32", 512, 10]["sts_avg_minus_batch64"] == [4.0]
    assert big["sts_avg_mean"] == pytest.approx(25.0) and big["sts_avg_std"] == pytest.approx(4.33, abs=0.01)


def test_recorded_batch_64_runs_are_copied_and_the_others_trained(tmp_path, monkeypatch, capsys, recipe):
    source = tmp_path / "claims.json"
    source.write_text(json.dumps({"runs": [_run(0, 64, 27.0)]}))
    trained = []

    def train_and_evaluate(spec, workers=1):
        trained.append(spec.name)
        return _run(spec.seed, spec.batch_size, 28.0)

    monkeypatch.setattr(claims, "train_and_evaluate", train_and_evaluate)
    results = tmp_path / "b.json"
    study = ["batch", "--backbones", "standin", "--batch-sizes", "64,512", "--seeds", "0"] + recipe
    args = study + ["--results", str(results), "--reuse-from", str(source)]
    assert claims.main(args + ["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "1 to copy from claims.json, 1 to do" in out
    assert "copy   standin-mixcse-lam0.2-s0-n250-test-fp32" in out and "to do  standin-mixcse-lam0.2-s0-n31-b512" in out
    assert not results.exists()
    assert claims.main(args) == 0 and trained == ["standin-mixcse-lam0.2-s0-n31-b512-test-fp32"]
    data = json.loads(results.read_text())
    assert [r.get("reused_from") for r in data["runs"]] == ["claims.json", None]
    assert [r["sts_avg_minus_batch64"] for r in data["summary"]] == [[], [pytest.approx(1.0)]]
    assert data["settings"]["batch_sizes"] == [64, 512] and data["settings"]["precision"] == "fp32"
    capsys.readouterr()
    assert claims.main(args) == 0 and len(trained) == 1  # all recorded: nothing trains again; the summary printed
    out = capsys.readouterr().out
    assert "standin MixCSE fp32 batch 512, 31 steps: STS avg 28.00 (n=1), minus batch 64 +1.00" in out
    with pytest.raises(SystemExit):  # the claims table's file is not a batch-size results file
        claims.main(study + ["--results", str(source), "--reuse-from", str(source)])
    assert "are the same file" in capsys.readouterr().err and len(json.loads(source.read_text())["runs"]) == 1
