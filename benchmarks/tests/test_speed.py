"""benchmarks/speed.py: the docs' ONNX table comes from onnx.json, a case writes the keys of its committed JSON, a
result records the module command, and bad input is one error line."""

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


@pytest.mark.skipif(not (common.STAND_IN.is_dir() and common.CORPUS.is_file()), reason="needs the shared stand-in")
def test_the_profile_case_writes_the_keys_of_its_committed_json(tmp_path):
    speed.main(["profile", "--quick", "--ops", "--results", str(tmp_path)])
    new = json.loads((tmp_path / "profile_step.json").read_text())
    old = json.loads((COMMITTED / "profile_step.json").read_text())
    assert set(new) == set(old) - {"adamw", "provenance"}  # provenance: a note on a record made before "commit"
    assert set(new["phases"]) == set(old["phases"]) == set(speed.PHASES)
    assert new["commit"] and new["machine"]["packages"]["mixcse"]  # every result: its commit and package versions
    assert new["mode"] == "quick" and new["steps"] == 6 and "aten::" in new["top_ops"]


def test_a_result_records_the_module_command(monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(common.REPO / "benchmarks" / "speed.py"), "mixing", "--quick"])
    assert common.command_line().endswith(" -m benchmarks.speed mixing --quick")


@pytest.mark.parametrize("argv, message", [(["nope"], "invalid choice"), (["mixing", "--rounds", "0"], "positive"),
                                           (["big-batch", "--mini-batch", "x"], "positive"), ([], "CASE")])
def test_bad_input_is_one_error_line_and_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        speed.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and err[-1].startswith("python -m benchmarks.speed") and message in err[-1]
