"""The claims harness (benchmarks/claims.py) and its CLIs: the plan, the cache logic, STS-only records, variants."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import claims, claims_report


def record(spec, transfer: bool) -> dict:
    return {"backbone": spec.backbone, "preset": spec.preset, "seed": spec.seed, "lam": spec.lam,
            "steps": spec.steps, "mode": spec.mode, "eval_precision": spec.eval_precision,
            "sts": {"avg": 80.0}, "transfer": {"MR": 75.0, "avg": 83.0} if transfer else None}


def test_plan_pairs_presets_by_seed_and_puts_extras_where_they_bind():
    jobs = claims.plan(["minilm", "standin"], ["simcse", "mixcse", "mixcse-single"], [0, 1], True,
                       None, "test", "bf16", transfer=False)
    runs = [j for kind, j in jobs if kind == "run"]
    first = [(r.backbone, r.preset, r.seed) for r in runs[:4]]
    assert first == [("minilm", "simcse", 0), ("minilm", "mixcse", 0), ("minilm", "simcse", 1), ("minilm", "mixcse", 1)]
    extras = [(r.backbone, r.preset, r.lam) for r in runs if r.seed == 0][-6:]
    assert extras == [("standin", "mixcse-bound", 0.2), ("minilm", "mixcse", 0.5), ("minilm", "mixcse-released", 0.2),
                      ("minilm", "mixcse", 0.1), ("minilm", "mixcse", 0.3), ("minilm", "mixcse-bound", 0.2)]
    assert all(not r.transfer for r in runs)
    assert ("baseline", "glove") in jobs and ("baseline", "minilm-raw-fp32") in jobs


def test_a_run_recorded_without_transfer_is_still_to_do_for_a_job_that_wants_it():
    full = claims.make_spec("minilm", "mixcse:0.5", 0, None, "test", "bf16")
    sts_only = claims.make_spec("minilm", "mixcse:0.5", 0, None, "test", "bf16", transfer=False)
    assert full.key == sts_only.key and full.name == sts_only.name  # same run directory: weights are reused
    data = {"runs": [record(full, transfer=False)], "baselines": [{"name": "glove", "mode": "test",
                                                                   "eval_precision": "bf16"}]}
    jobs = [("run", full), ("baseline", "glove"), ("baseline", "minilm-raw")]
    assert claims.pending_jobs(jobs, data, "test", "bf16") == [("run", full), ("baseline", "minilm-raw")]
    assert claims.pending_jobs([("run", sts_only)], data, "test", "bf16") == []
    data["runs"] = [record(full, transfer=True)]
    assert claims.pending_jobs([("run", full)], data, "test", "bf16") == []


def test_summary_and_tables_of_a_run_without_transfer():
    res = {"sts": {"STS12": {"spearman": 70.0}, "avg": 70.0},
           "analysis": {"alignment": 0.3, "uniformity": -2.0, "max_angle": 100.0, "mean_angle": 60.0,
                        "mean_cosine": 0.4},
           "settings": {"mode": "test", "classifier": "sklearn", "batch_size": 128, "seconds": {}}}
    out = claims.summarise_eval(res)
    assert out["transfer"] is None and out["mrpc_f1"] is None and out["sts"] == {"STS12": 70.0, "avg": 70.0}
    spec = claims.make_spec("minilm", "mixcse:0.5", 0, None, "test", "bf16", transfer=False)
    data = {"runs": [{**record(spec, transfer=False), **out}], "baselines": []}
    assert any("λ=0.5" in row for row in claims_report.task_table(data, "minilm", "sts"))
    assert not any("λ=0.5" in row for row in claims_report.task_table(data, "minilm", "transfer"))


def test_both_clis_build_the_same_config_from_one_variant_syntax(tmp_path):
    from mixcse.training.config import build_config

    base = claims.probe_base("m", "c.txt", "d", "avg", 1e-5, 200, 25, 1)
    half = build_config(claims.train_config(base, *claims.parse_variant("mixcse:0.5"), 3, str(tmp_path)))
    default = build_config(claims.train_config(base, *claims.parse_variant("mixcse"), 3, str(tmp_path)))
    assert half.objective().lam == 0.5 and default.objective().lam == 0.2 and half.seed == default.seed == 3
    assert build_config(claims.train_config(base, "simcse", None, 0, str(tmp_path))).objective().lam is None
    table = claims.make_spec("minilm", "mixcse:0.3", 1, None, "test", "bf16").config()
    assert table["lam"] == 0.3 and table["loss"] == "mixcse" and table["seed"] == 1 and table["max_steps"] == 200
    assert "lam" not in claims.make_spec("minilm", "mixcse", 1, None, "test", "bf16").config()  # the preset's own
    assert claims.split_values(["0,1", "2"]) == ["0", "1", "2"] == claims.split_values("0,1,2")


def test_a_bad_variant_or_seed_is_refused_before_anything_runs(tmp_path, capsys):
    from benchmarks import paper_claims
    for bad in ("nope", "mixcse:x"):
        with pytest.raises(SystemExit) as stop:
            paper_claims.main(["--presets", f"simcse,{bad}", "--dry-run", "--results", str(tmp_path / "r.json")])
        assert stop.value.code == 2 and f"unknown variant {bad!r}" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()
    from benchmarks import steps_probe  # the same syntax and check in the GPU probe
    probe = ["--model", "m", "--corpus", "c", "--data", "d", "--out", str(tmp_path / "p.json")]
    for args in (["--presets", "simcse", "mixcse:x"], ["--seeds", "0,one"]):
        with pytest.raises(SystemExit) as stop:
            steps_probe.main(probe + args)
        assert stop.value.code == 2 and "error:" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()


def test_the_table_evaluates_the_best_checkpoint_of_training_not_the_start_model():
    records = [{"step": 0, "stsb_dev": 30.0}, {"step": 5, "loss": 1.0}, {"step": 25, "stsb_dev": 28.0},
               {"step": 50, "stsb_dev": 29.0}, {"step": 75, "stsb_dev": 29.0}]
    assert claims.training_best(records) == (50, 29.0)  # the start scores higher; the earliest of a tie wins
    assert claims.make_spec("standin", "simcse", 0, None, "test", "fp32").config()["save_candidates"] is True


def test_the_pytorch_probe_is_added_to_a_recorded_run_from_the_recorded_checkpoint(monkeypatch, tmp_path):
    """A recorded run is retrained from its recorded config (keys mixcse no longer has dropped) and the candidate at
    its recorded best step is evaluated; whether that is the recorded model is checked on STS-B dev there."""
    spec = claims.make_spec("standin", "mixcse", 1, None, "test", "bf16")
    rec = {**record(spec, transfer=True), "eval_steps": spec.eval_steps, "best_step": 50, "best_dev": 29.5,
           "config": {**spec.config(), "eval_at_start": True, "num_threads": 2}}
    seen = {}

    def train_run(cfg, reuse=False):
        seen["cfg"] = cfg
        return None, [{"step": 0, "stsb_dev": 30.0}, {"step": 50, "stsb_dev": 29.5}], 12.0, False

    def transfer(encoder, mode, precision, workers, cache_dir=None):
        seen["encoder"], seen["precision"] = encoder, precision
        return {"transfer_pytorch": {"MR": 70.0, "avg": 81.0}, "mrpc_f1_pytorch": 80.0}, {"lr": 1e-3}, 3.0

    monkeypatch.setattr(claims, "RUNS_DIR", tmp_path)
    monkeypatch.setattr(claims, "train_run", train_run)
    monkeypatch.setattr(claims, "pytorch_transfer", transfer)
    out = claims.add_pytorch_probe("run", rec)
    assert "eval_at_start" not in seen["cfg"] and seen["cfg"]["num_threads"] == 2 and seen["cfg"]["seed"] == 1
    assert seen["encoder"] == str(tmp_path / spec.name / "candidates" / "step-50") and seen["precision"] == "bf16"
    assert out["transfer_pytorch"]["avg"] == 81.0 and out["transfer"] == rec["transfer"]  # sklearn kept beside
    assert out["pytorch_probe"]["same_model"] is True
    assert claims.add_pytorch_probe("run", {**rec, "best_dev": 29.4})["pytorch_probe"]["same_model"] is False
    data = {"runs": [out, {**rec, "preset": "simcse", "lam": None}, {**rec, "preset": "mixcse-wo-sg", "seed": 0}],
            "baselines": [{"name": "glove", "backbone": "glove", "transfer": {"avg": 75.0}}]}
    order = [(kind, r.get("preset", r.get("name"))) for kind, r in claims.pytorch_probe_order(data)]
    assert order == [("run", "simcse"), ("baseline", "glove"), ("run", "mixcse-wo-sg")]  # headline pairs first


def test_the_fp32_table_trains_and_evaluates_in_fp32(tmp_path, monkeypatch, capsys):
    import copy

    import torch

    from benchmarks import paper_claims
    monkeypatch.setattr(claims, "BACKBONES", copy.deepcopy(claims.BACKBONES))
    monkeypatch.setattr(claims, "COMMON", dict(claims.COMMON))
    args = ["--precision", "fp32", "--backbones", "standin", "--presets", "simcse", "--seeds", "0", "--dry-run",
            "--no-baselines", "--threads", str(torch.get_num_threads()), "--results", str(tmp_path / "r.json")]
    assert paper_claims.main(args) == 0
    assert "to do  standin-simcse-lamnone-s0-n250-test-fp32" in capsys.readouterr().out
    spec = claims.make_spec("standin", "simcse", 0, None, "test", "fp32")
    assert spec.config()["precision"] == "fp32" and not (tmp_path / "r.json").exists()


def test_a_baseline_records_both_probes_from_one_embedding_cache(monkeypatch, tmp_path):
    import mixcse.evaluation

    class Encoder:
        fingerprint = "raw-model|avg"

    seen = []

    def table_evaluation(encoder, mode, precision, workers, tasks=claims.TASKS, cache_dir=None):
        seen.append(("sklearn", encoder, precision, cache_dir))
        Path(cache_dir).mkdir(parents=True)
        res = {"sts": {"STS12": {"spearman": 70.0}, "avg": 70.0},
               "transfer": {"MR": {"acc": 76.0}, "MRPC": {"acc": 70.0, "f1": 80.0}, "avg": 73.0},
               "analysis": {"alignment": 0.3, "uniformity": -2.0, "max_angle": 100.0, "mean_angle": 60.0,
                            "mean_cosine": 0.4},
               "settings": {"mode": mode, "classifier": "sklearn", "batch_size": 128, "seconds": {}}}
        return res, 10.0

    def transfer(encoder, mode, precision, workers, cache_dir=None):
        seen.append(("pytorch", encoder, precision, cache_dir))
        return {"transfer_pytorch": {"MR": 75.0, "MRPC": 71.0, "avg": 73.0}, "mrpc_f1_pytorch": 79.0}, {"lr": 1e-3}, 3.0

    encoder = Encoder()
    monkeypatch.setattr(claims, "CACHE", tmp_path)
    monkeypatch.setattr(claims, "baseline_encoder", lambda name: encoder)
    monkeypatch.setattr(mixcse.evaluation, "stsb_dev_spearman", lambda enc, data_dir: 80.0)
    monkeypatch.setattr(claims, "table_evaluation", table_evaluation)
    monkeypatch.setattr(claims, "pytorch_transfer", transfer)
    out = claims.run_baseline("minilm-raw", "test", "fp32", workers=2)
    assert [s[0] for s in seen] == ["sklearn", "pytorch"] and seen[0][1:] == seen[1][1:]  # same encoder and cache
    assert seen[0][3] is not None and not Path(seen[0][3]).exists()  # the cache is deleted afterwards
    assert out["transfer"] == {"MR": 76.0, "MRPC": 70.0, "avg": 73.0} and out["mrpc_f1"] == 80.0
    assert out["transfer_pytorch"]["MR"] == 75.0 and out["mrpc_f1_pytorch"] == 79.0
    assert out["pytorch_probe"]["eval_workers"] == 2 and out["eval_seconds"] == 13.0 and out["stsb_dev"] == 80.0
    # the bf16 path keeps a fingerprint of its own, so its embeddings are cached (and never mixed with fp32 ones)
    assert claims.Autocast(encoder).fingerprint == "raw-model|avg|cpu-bf16-autocast"
    assert claims.Autocast(object()).fingerprint is None
