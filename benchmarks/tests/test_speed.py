"""benchmarks/speed.py: every generated block of the docs comes from its committed JSON, the roofline's FLOP count
is torch's own count, a case writes the keys of its committed JSON, a result records the module command, and bad
input is one error line."""

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


@pytest.mark.parametrize("block", sorted(speed.BLOCKS))
def test_each_generated_block_of_the_docs_is_its_committed_json_rendered(block):
    page, render = speed.BLOCKS[block]
    text = (common.REPO / page).read_text()
    begin, end = f"<!-- begin generated:{block} (python -m benchmarks.report) -->", f"<!-- end generated:{block} -->"
    assert text.count(begin) == text.count(end) == 1
    assert text.split(begin)[1].split(end)[0].strip() == render().strip()


def test_useful_flops_are_what_torch_counts_for_one_unpadded_sentence(tiny_bert):
    """torch's FLOP counter over the eager-attention model (its linear layers, attention's two matrix products and
    the pooler layer that the sentence embedding does not use) equals encoder_flops plus that pooler."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModel

    model = AutoModel.from_pretrained(tiny_bert, attn_implementation="eager").eval()
    for n in (5, 17):
        ids = torch.arange(5, 5 + n)[None]
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model(input_ids=ids, attention_mask=torch.ones_like(ids))
        pooler = 2 * model.config.hidden_size ** 2
        assert counter.get_total_flops() == speed.encoder_flops(model.config, [n]) + pooler
    assert speed.encoder_flops(model.config, [5, 17]) == speed.encoder_flops(model.config, [5]) + \
        speed.encoder_flops(model.config, [17])


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
    monkeypatch.setattr(sys, "argv", [str(common.REPO / "benchmarks" / "speed.py"), "roofline", "--quick"])
    assert common.command_line().endswith(" -m benchmarks.speed roofline --quick")


@pytest.mark.parametrize("argv, message", [(["nope"], "invalid choice"), (["bf16-eval", "--precision", "fp16"],
                                                                          "invalid choice"),
                                           (["big-batch", "--mini-batch", "x"], "positive"), ([], "CASE")])
def test_bad_input_is_one_error_line_and_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        speed.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and err[-1].startswith("python -m benchmarks.speed") and message in err[-1]
