"""`mixcse eval` on a mixcse model directory adds its results table to the model card."""

import json
import os
import stat

from mixcse.cli import main
from mixcse.models.encoder import load_encoder
from mixcse.evaluation.modelcard import write_model_card


def model_dir_with_card(tiny_bert, tmp_path):
    """A mixcse model directory (mixcse.json, model card) of the tiny BERT."""
    encoder, tokenizer, _ = load_encoder(str(tiny_bert), pooler="cls")
    best = tmp_path / "best"
    encoder.save(best, tokenizer)
    write_model_card(best, {"config": {"model": str(tiny_bert), "loss": "mixcse"}}, {"steps": 0})
    return best


def test_eval_updates_the_model_card(tiny_bert, synthetic_data, tmp_path, capsys):
    best = model_dir_with_card(tiny_bert, tmp_path)
    before = (best / "README.md").read_text()
    out = tmp_path / "results.json"
    code = main(["eval", str(best), "--tasks", "STSBenchmark", "--data-dir", str(synthetic_data["data_dir"]),
                 "--output", str(out)])
    assert code == 0
    spearman = json.loads(out.read_text())["sts"]["STSBenchmark"]["spearman"]
    after = (best / "README.md").read_text()
    assert after != before and f"{spearman:.2f}" in after
    assert "updated the model card" in capsys.readouterr().out
    umask = os.umask(0)
    os.umask(umask)
    for name in ("README.md", "mixcse.json", "config.json"):  # rewritten files keep the normal mode
        assert stat.S_IMODE((best / name).stat().st_mode) == 0o666 & ~umask, name
    assert main(["eval", str(best), "--tasks", "STSBenchmark", "--data-dir", str(synthetic_data["data_dir"]),
                 "--output", str(out)]) == 2  # an existing results file is never overwritten silently


def test_a_bf16_evaluation_is_saved_but_never_written_into_the_model_card(tiny_bert, synthetic_data, tmp_path, capsys):
    best = model_dir_with_card(tiny_bert, tmp_path)
    before = (best / "README.md").read_text()
    out = tmp_path / "bf16.json"
    argv = ["eval", str(best), "--tasks", "STSBenchmark", "--data-dir", str(synthetic_data["data_dir"])]
    assert main(argv + ["--precision", "bf16", "--output", str(out)]) == 0
    assert json.loads(out.read_text())["settings"]["precision"] == "bf16"
    assert (best / "README.md").read_text() == before
    assert "updated the model card" not in capsys.readouterr().out
    assert main(argv) == 0  # fp32 (the default) does update it
    assert (best / "README.md").read_text() != before
