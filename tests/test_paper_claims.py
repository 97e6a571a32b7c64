"""The claims benchmark's driver (benchmarks/paper_claims.py): its plan, its cache logic, STS-only records."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
paper_claims = pytest.importorskip("paper_claims")
claims_report = pytest.importorskip("claims_report")


def record(spec, transfer: bool) -> dict:
    return {"backbone": spec.backbone, "preset": spec.preset, "seed": spec.seed, "lam": spec.lam,
            "steps": spec.steps, "mode": spec.mode, "eval_precision": spec.eval_precision,
            "sts": {"avg": 80.0}, "transfer": {"MR": 75.0, "avg": 83.0} if transfer else None}


def test_plan_pairs_presets_by_seed_and_puts_extras_where_they_bind():
    jobs = paper_claims.plan(["minilm", "standin"], ["simcse", "mixcse", "mixcse-single"], [0, 1], True,
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
    full = paper_claims.make_spec("minilm", "mixcse", 0, 0.5, None, "test", "bf16")
    sts_only = paper_claims.make_spec("minilm", "mixcse", 0, 0.5, None, "test", "bf16", transfer=False)
    assert full.key == sts_only.key and full.name == sts_only.name  # same run directory: weights are reused
    data = {"runs": [record(full, transfer=False)], "baselines": [{"name": "glove", "mode": "test",
                                                                   "eval_precision": "bf16"}]}
    jobs = [("run", full), ("baseline", "glove"), ("baseline", "minilm-raw")]
    assert paper_claims.pending_jobs(jobs, data, "test", "bf16") == [("run", full), ("baseline", "minilm-raw")]
    assert paper_claims.pending_jobs([("run", sts_only)], data, "test", "bf16") == []
    data["runs"] = [record(full, transfer=True)]
    assert paper_claims.pending_jobs([("run", full)], data, "test", "bf16") == []


def test_summary_and_tables_of_a_run_without_transfer():
    res = {"sts": {"STS12": {"spearman": 70.0}, "avg": 70.0},
           "analysis": {"alignment": 0.3, "uniformity": -2.0, "max_angle": 100.0, "mean_angle": 60.0,
                        "mean_cosine": 0.4},
           "settings": {"mode": "test", "classifier": "sklearn", "batch_size": 128, "seconds": {}}}
    out = paper_claims.summarise_eval(res)
    assert out["transfer"] is None and out["mrpc_f1"] is None and out["sts"] == {"STS12": 70.0, "avg": 70.0}
    spec = paper_claims.make_spec("minilm", "mixcse", 0, 0.5, None, "test", "bf16", transfer=False)
    data = {"runs": [{**record(spec, transfer=False), **out}], "baselines": []}
    assert any("λ=0.5" in row for row in claims_report.task_table(data, "minilm", "sts"))
    assert not any("λ=0.5" in row for row in claims_report.task_table(data, "minilm", "transfer"))


def test_steps_probe_variants_carry_their_lambda_to_the_trainer(tmp_path):
    from mixcse.config import build_config

    steps_probe = pytest.importorskip("steps_probe")
    cfg = {"model": "m", "corpus": "c.txt", "data": "d", "pooler": "avg", "lr": 1e-5, "steps": 200,
           "eval_steps": 25, "threads": 1}
    half = build_config(steps_probe.train_config(cfg, "mixcse:0.5", 3, str(tmp_path)))
    default = build_config(steps_probe.train_config(cfg, "mixcse", 3, str(tmp_path)))
    assert half.objective().lam == 0.5 and default.objective().lam == 0.2 and half.seed == default.seed == 3
    assert build_config(steps_probe.train_config(cfg, "simcse", 0, str(tmp_path))).objective().lam is None
