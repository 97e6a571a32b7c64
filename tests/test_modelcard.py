"""Model cards: front matter, recipe, dev and eval tables, and usage snippets that run as written."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
import yaml

from mixcse.models.encoder import load_encoder
from mixcse.evaluation.modelcard import MODEL_PLACEHOLDER, update_model_card_with_eval, write_model_card
from mixcse.models.sentence_encoder import SentenceEncoder

RESOLVED = {
    "config": {"model": "bert-base-uncased", "train_file": "/home/someone/data/wiki1m_for_simcse.txt",
               "output_dir": "runs/mixcse-bert-base", "loss": "mixcse", "lam": None, "temperature": 0.05,
               "pooler": "cls", "mlp_only_train": True, "max_seq_length": 32, "batch_size": 64,
               "learning_rate": 3e-5, "max_sentences": None, "dedupe": False, "seed": 42, "precision": "auto",
               "warmup_ratio": 0.0, "weight_decay": 0.0},
    "objective": {"lam": 0.2, "temperature": 0.05, "directions": 2, "mix_grad": "stop", "lam_bound": False,
                  "formulation": "paper"},
    "precision": "bf16", "world_size": 1, "total_steps": 15625, "device": "cuda:0",
}
SUMMARY = {"raw_dev": 31.2345, "best_dev": 82.5678, "best_step": 1250, "train_seconds": 3600.0, "steps": 15625,
           "total_steps": 15625, "test_pooler": "cls_before_pooler", "sentences_per_second": 277.0}
EVAL = {
    "sts": {"STS12": {"spearman": 71.234}, "STS13": {"spearman": 83.1}, "STS14": {"spearman": 75.0},
            "STS15": {"spearman": 82.0}, "STS16": {"spearman": 79.9}, "STSBenchmark": {"spearman": 80.5},
            "SICKRelatedness": {"spearman": float("nan")}, "avg": 78.62},
    "transfer": {"MR": {"acc": 81.0}, "CR": {"acc": 86.1}, "avg": 83.55},
    "settings": {"mode": "test"},
}


@pytest.fixture()
def model_dir(tiny_bert, tmp_path):
    encoder, tokenizer, _ = load_encoder(str(tiny_bert), pooler="cls_before_pooler")
    path = tmp_path / "runs" / "mixcse-bert-base" / "best"
    encoder.save(path, tokenizer)
    return path


def front_matter(text: str) -> dict:
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def code_blocks(text: str, language: str = "python") -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def test_card_front_matter_and_sections(model_dir):
    path = write_model_card(model_dir, RESOLVED, SUMMARY)
    assert path == model_dir / "README.md"
    text = path.read_text()
    meta = front_matter(text)
    assert meta["library_name"] == "sentence-transformers"
    assert meta["pipeline_tag"] == "sentence-similarity"
    assert {"sentence-transformers", "sentence-similarity", "mixcse"} <= set(meta["tags"])
    assert meta["base_model"] == "bert-base-uncased"
    assert "# mixcse-bert-base" in text  # the run's name, not "best"
    assert "[bert-base-uncased](https://huggingface.co/bert-base-uncased)" in text
    for row in ["| loss preset | `mixcse` |", "| λ (mixing coefficient) | 0.2 |", "| τ (temperature) | 0.05 |",
                "| batch size | 64 |", "| learning rate | 3e-05 |", "| steps | 15625 |",
                "| pooler (training) | `cls` + MLP head (training only) |", "| precision | bf16 |",
                "| start (before training) | 31.23 |", "| selected (step 1250) | 82.57 |"]:
        assert row in text, row
    assert "`wiki1m_for_simcse.txt`" in text and "/home/someone" not in text  # no local paths
    assert "Transformer (BertModel) -> Pooling (cls)" in text
    assert "64-dimensional" in text and "## Evaluation" not in text
    assert "Selected on" in text and "No selection data" not in text  # a selected run says only that
    record = json.loads((model_dir / "mixcse.json").read_text())
    assert record["pooler"] == "cls_before_pooler" and record["training"]["objective"]["lam"] == 0.2
    assert record["summary"]["best_step"] == 1250 and "eval" not in record


def test_card_with_eval_tables_and_update(model_dir):
    write_model_card(model_dir, RESOLVED, SUMMARY)
    update_model_card_with_eval(model_dir, EVAL)
    text = (model_dir / "README.md").read_text()
    assert "| STS12 | STS13 | STS14 | STS15 | STS16 | STS-B | SICK-R | Avg. |" in text
    assert "| 71.23 | 83.10 | 75.00 | 82.00 | 79.90 | 80.50 | -- | 78.62 |" in text
    assert "| MR | CR | Avg. |" in text and "| 81.00 | 86.10 | 83.55 |" in text
    assert "mode test" in text
    assert "| selected (step 1250) | 82.57 |" in text  # the recipe survived the rewrite
    record = json.loads((model_dir / "mixcse.json").read_text())
    assert record["eval"]["sts"]["SICKRelatedness"]["spearman"] is None  # NaN stored as null
    write_model_card(model_dir, RESOLVED, SUMMARY)  # retraining drops the stale table
    assert "## Evaluation" not in (model_dir / "README.md").read_text()


def test_card_for_simcse_local_base_and_no_dev(model_dir):
    resolved = json.loads(json.dumps(RESOLVED))
    resolved["config"].update(model="../shared/models/mini-wiki-mlm", loss="simcse")
    resolved["objective"].update(lam=None, directions=1)
    summary = dict(SUMMARY, raw_dev=None, best_dev=None, best_step=20, steps=20, total_steps=20)
    text = write_model_card(model_dir, resolved, summary).read_text()
    meta = front_matter(text)
    assert "base_model" not in meta and "simcse" in meta["tags"]
    assert "`mini-wiki-mlm` (a local model)" in text
    assert "| λ (mixing coefficient) | -- (no mixed negatives) |" in text
    assert "mixed-negative gradient" not in text
    assert "No selection data was used during training: this is the final checkpoint (step 20)." in text


def test_update_without_training_record(model_dir):
    update_model_card_with_eval(model_dir, {"sts": {"STSBenchmark": {"spearman": 50.0}, "avg": 50.0}})
    text = (model_dir / "README.md").read_text()
    assert front_matter(text)["library_name"] == "sentence-transformers"
    assert "| STS-B | Avg. |" in text and "## Training" not in text
    from mixcse.errors import MixCSEError

    with pytest.raises(MixCSEError):
        update_model_card_with_eval(model_dir / "missing", EVAL)


@pytest.mark.parametrize("pooler", ["cls_before_pooler", "cls", "avg", "avg_first_last"])
def test_usage_snippets_run_and_agree(tiny_bert, tmp_path, pooler):
    encoder, tokenizer, _ = load_encoder(str(tiny_bert), pooler=pooler, mlp_only_train=pooler != "cls")
    path = tmp_path / "model"
    encoder.save(path, tokenizer)
    text = write_model_card(path, RESOLVED, dict(SUMMARY, test_pooler=pooler)).read_text()
    blocks = {b.split("\n")[0]: b.replace(MODEL_PLACEHOLDER, str(path)) for b in code_blocks(text)}
    assert len(blocks) == 3
    expected_sentences = None
    for first_line, block in blocks.items():
        namespace: dict = {}
        exec(compile(block, f"<card {first_line}>", "exec"), namespace)  # noqa: S102
        sentences = namespace["sentences"]
        expected_sentences = expected_sentences or sentences
        embeddings = namespace["embeddings"]
        if isinstance(embeddings, torch.Tensor):
            embeddings = embeddings.numpy()
        np.testing.assert_allclose(embeddings, SentenceEncoder.load(path).encode(sentences), atol=1e-5)
        assert namespace["similarities"].shape == (3, 3)
    assert ("trust_remote_code=True" in text) == pooler.startswith("avg_")
    assert f"mixcse encode {MODEL_PLACEHOLDER} --input" in text
