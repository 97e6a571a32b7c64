"""benchmarks/batch_size.py: the plan (equal sentences, cached step above batch 64), keys that leave the claims
table's runs as they were, reuse of recorded batch-64 runs, the paired summary, bad input."""

from __future__ import annotations

import copy
import json

import pytest

from benchmarks import batch_size, claims


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """main() sets the precision and thread count of the harness's module-level recipe: keep that to the test."""
    import torch

    monkeypatch.setattr(claims, "BACKBONES", copy.deepcopy(claims.BACKBONES))
    monkeypatch.setattr(claims, "COMMON", dict(claims.COMMON))
    monkeypatch.setattr(claims, "CACHE", tmp_path / "cache")
    return ["--threads", str(torch.get_num_threads())]


def test_every_batch_size_reads_about_the_same_sentences_and_only_larger_ones_are_cached():
    jobs = batch_size.plan(["minilm", "standin"], ["mixcse", "mixcse:0.2"], [0], [64, 512, 2048], 64, "fp32", False)
    got = [(j.backbone, j.batch_size, j.steps, j.eval_steps, j.mini_batch_size) for j in jobs]
    assert got == [("standin", 64, 250, 25, None), ("standin", 512, 31, 3, 64), ("standin", 2048, 8, 1, 64),
                   ("minilm", 64, 200, 25, None), ("minilm", 512, 25, 3, 64), ("minilm", 2048, 6, 1, 64)]
    # batch 64 is the claims table's own run: its key and folder name are the ones records already have
    assert jobs[3].key == ("minilm", "mixcse", 0, 0.2, 200, "test", "fp32")
    assert jobs[3].name == "minilm-mixcse-lam0.2-s0-n200-test-fp32"
    assert jobs[4].name == "minilm-mixcse-lam0.2-s0-n25-b512-test-fp32" and jobs[4].key[-1] == 512
    cfg = jobs[4].config()
    assert cfg["batch_size"] == 512 and cfg["mini_batch_size"] == 64 and cfg["max_steps"] == 25
    assert "mini_batch_size" not in jobs[3].config() and jobs[3].config()["batch_size"] == 64
    from mixcse.training.config import build_config

    built = build_config(cfg)
    assert built.batch_size == 512 and built.mini_batch_size == 64 and built.eval_steps == 3
    small = batch_size.plan(["standin"], ["mixcse"], [0], [64, 128], 32, "fp32", False)
    assert [j.mini_batch_size for j in small] == [None, 32]  # batch 64 stays the table's one-pass run


def test_records_without_a_batch_size_keep_their_key():
    old = {"backbone": "minilm", "preset": "mixcse", "seed": 0, "lam": 0.2, "steps": 200, "mode": "test",
           "eval_precision": "fp32"}
    assert claims.run_key(old) == ("minilm", "mixcse", 0, 0.2, 200, "test", "fp32")
    assert claims.run_key({**old, "batch_size": 64}) == claims.run_key(old)
    assert claims.run_key({**old, "batch_size": 512}) == claims.run_key(old) + (512,)
    assert claims.spec_of({**old, "eval_steps": 3, "batch_size": 512, "mini_batch_size": 64}).batch_size == 512


def _run(seed: int, batch: int, sts: float, precision: str = "fp32", steps: int | None = None) -> dict:
    r = {"backbone": "standin", "preset": "mixcse", "seed": seed, "lam": 0.2,
         "steps": steps or claims.equal_sentences(250, batch), "mode": "test", "eval_precision": precision,
         "sts": {"avg": sts}, "transfer": None, "best_dev": 30.0, "best_step": 25, "train_seconds": 100.0}
    return r if batch == 64 else {**r, "batch_size": batch}  # claims records carry no batch size


def test_the_summary_pairs_each_batch_with_batch_64_of_the_same_precision_and_budget():
    data = {"runs": [_run(0, 64, 27.0), _run(1, 64, 26.0), _run(0, 512, 27.5), _run(1, 512, 27.5),
                     _run(2, 512, 20.0),  # seed 2 has no batch-64 run: not paired
                     _run(0, 64, 10.0, "bf16"), _run(0, 512, 11.0, "bf16"),  # another precision: its own rows
                     _run(0, 64, 5.0, steps=10), _run(0, 512, 9.0, steps=10)]}  # --steps 10: equal steps
    rows = {(r["eval_precision"], r["batch_size"], r["steps"]): r for r in batch_size.summarise(data)}
    assert rows["fp32", 64, 250]["sts_avg_minus_batch64"] == [] and rows["fp32", 64, 250]["n"] == 2
    big = rows["fp32", 512, 31]
    assert big["sts_avg_minus_batch64"] == [0.5, 1.5] and big["sts_avg_minus_batch64_mean"] == 1.0
    assert big["n"] == 3 and big["sentences"] == 512 * 31 and "better on 2/2 seeds" in big["sts_avg_minus_batch64_text"]
    assert rows["bf16", 512, 31]["sts_avg_minus_batch64"] == [1.0]
    assert rows["fp32", 512, 10]["sts_avg_minus_batch64"] == [4.0]
    assert "| standin | MixCSE | fp32 | 512 | 31 | 15,872 | 3 |" in batch_size.table(list(rows.values()))


def test_recorded_batch_64_runs_are_copied_and_the_others_trained(tmp_path, monkeypatch, capsys, isolated):
    source = tmp_path / "claims.json"
    source.write_text(json.dumps({"runs": [_run(0, 64, 27.0)]}))
    trained = []

    def train_and_evaluate(spec, workers=1):
        trained.append(spec.name)
        return _run(spec.seed, spec.batch_size, 28.0)

    monkeypatch.setattr(claims, "train_and_evaluate", train_and_evaluate)
    monkeypatch.setattr(claims, "cleanup_weights", lambda spec: None)
    results = tmp_path / "b.json"
    args = isolated + ["--backbones", "standin", "--batch-sizes", "64,512", "--seeds", "0", "--results",
                       str(results), "--reuse-from", str(source)]
    assert batch_size.main(args + ["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "1 to copy from claims.json, 1 to train" in out
    assert "copy   standin-mixcse-lam0.2-s0-n250-test-fp32" in out and "train  standin-mixcse-lam0.2-s0-n31-b512" in out
    assert not results.exists()
    assert batch_size.main(args) == 0
    assert trained == ["standin-mixcse-lam0.2-s0-n31-b512-test-fp32"]
    data = json.loads(results.read_text())
    assert [r.get("reused_from") for r in data["runs"]] == ["claims.json", None]
    assert [r["sts_avg_minus_batch64"] for r in data["summary"]] == [[], [pytest.approx(1.0)]]
    assert data["settings"]["batch_sizes"] == [64, 512] and data["settings"]["precision"] == "fp32"
    before = results.read_text()
    assert batch_size.main(args) == 0 and len(trained) == 1  # all recorded: nothing trains again
    assert batch_size.main(["--report-only", "--results", str(results)]) == 0
    assert "| standin | MixCSE | fp32 | 512 |" in capsys.readouterr().out and results.read_text() == before


@pytest.mark.parametrize("args, message", [
    (["--batch-sizes", "64,500"], "error: --mini-batch-size 64 does not divide batch size 500"),
    (["--steps", "0"], "must be >= 1"),
    (["--eval-workers", "0"], "must be >= 1"),
    (["--reuse-from", "missing.json"], "error: --reuse-from missing.json: no such file"),
])
def test_bad_input_is_refused_with_one_error_line_before_anything_is_written(tmp_path, capsys, isolated, args,
                                                                             message):
    results = tmp_path / "b.json"
    with pytest.raises(SystemExit) as exit_:
        batch_size.main(isolated + args + ["--results", str(results), "--dry-run"])
    assert exit_.value.code == 2 and message in capsys.readouterr().err and not results.exists()


def test_the_claims_table_file_is_not_a_batch_size_results_file(tmp_path, capsys, isolated):
    claims_file = tmp_path / "claims.json"
    claims_file.write_text(json.dumps({"runs": [_run(0, 64, 27.0)]}))
    before = claims_file.read_text()
    with pytest.raises(SystemExit):
        batch_size.main(isolated + ["--results", str(claims_file), "--reuse-from", str(claims_file)])
    assert "are the same file" in capsys.readouterr().err and claims_file.read_text() == before
