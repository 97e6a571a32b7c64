"""benchmarks/speed.py: the docs' ONNX table comes from onnx.json, a case writes the keys of its committed JSON,
the two STS paths score alike, and bad input is one error line."""

from __future__ import annotations

import json
import sys

import pytest

from benchmarks import common, speed

COMMITTED = common.RESULTS


@pytest.fixture(autouse=True)
def results_folder(monkeypatch):
    """``--results`` repoints the module's results folder: back to the committed one after each test."""
    monkeypatch.setattr(common, "RESULTS", COMMITTED)


def test_the_onnx_table_of_the_docs_is_generated_from_the_committed_json(capsys):
    speed.main(["onnx", "--table"])
    table = capsys.readouterr().out.strip()
    assert table.count("| onnx int8 per-tensor |") == 2
    assert table in (common.REPO / "docs" / "performance.md").read_text()


def test_the_gpu_case_without_cuda_writes_the_keys_of_its_committed_smoke_json(tmp_path, monkeypatch):
    monkeypatch.setattr(speed.torch.cuda, "is_available", lambda: False)
    speed.main(["gpu", "--batches", "16", "--results", str(tmp_path)])
    new = json.loads((tmp_path / "gpu_step_smoke.json").read_text())
    old = json.loads((COMMITTED / "gpu_step_smoke.json").read_text())
    assert set(old) <= set(new) and set(old["results"][0]) == set(new["results"][0])
    assert new["results"][0]["mixcse"]["steps_per_s"] > 0 and new["projection"] == {}


def test_a_result_records_the_module_command(monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(common.REPO / "benchmarks" / "speed.py"), "mixing", "--quick"])
    assert common.command_line().endswith(" -m benchmarks.speed mixing --quick")


@pytest.mark.skipif(not (common.DOWNSTREAM / "STS").is_dir(), reason="needs the shared STS data")
def test_the_evaluator_and_the_per_pair_loop_give_the_same_sts_scores(tmp_path):
    speed.main(["sts", "--fake", "--quick", "--results", str(tmp_path)])
    out = json.loads((tmp_path / "sts_speed.json").read_text())
    assert out["tasks"] == ["STS13", "STSBenchmark"] and out["max_abs_score_diff_x100"] <= 1e-9
    assert out["evaluator"]["sentences_encoded"] < out["per_pair_loop"]["sentences_encoded"]


@pytest.mark.parametrize("argv, message", [(["nope"], "invalid choice"), (["mixing", "--rounds", "0"], "positive"),
                                           (["big-batch", "--mini-batch", "x"], "positive"), ([], "CASE")])
def test_bad_input_is_one_error_line_and_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        speed.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and err[-1].startswith("python -m benchmarks.speed") and message in err[-1]
