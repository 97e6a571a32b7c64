"""Positives beyond dropout (``positives: neighbours | title``): the pairs a document gives, and the step encoding
anchors as view 1 and positives as view 2."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import FILLER, TOPICS, make_tiny_bert

import mixcse
from mixcse.data.documents import read_positive_pairs
from mixcse.data.loader import CorpusLoader
from mixcse.data.memory import PairedCorpus
from mixcse.errors import ConfigError, DataError
from mixcse.losses import PRESETS, contrastive_loss
from mixcse.models.encoder import load_encoder
from mixcse.training.config import TrainConfig
from mixcse.training.distributed import DistContext
from mixcse.training.step import PlainStep

DOCS = [
    {"_id": "1", "title": "Cells divide very often",
     "text": "The first sentence is here. A second one follows it. Tiny."},
    {"_id": "2", "title": "", "text": "Another document starts now. It ends with this sentence."},
    {"_id": "3", "title": "Cells divide very often", "text": "The first sentence is here. Then a new second sentence."},
]


@pytest.fixture
def docs(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    return path


def test_neighbour_pairs_follow_each_document(docs):
    pairs, stats = read_positive_pairs(docs, positives="neighbours", dedupe=False)
    assert pairs == [("Cells divide very often", "The first sentence is here."),
                     ("The first sentence is here.", "A second one follows it."),  # "Tiny." is under 4 words
                     ("Another document starts now.", "It ends with this sentence."),
                     ("Cells divide very often", "The first sentence is here."),
                     ("The first sentence is here.", "Then a new second sentence.")]
    assert stats["dropped_short"] == 1 and stats["segments"] == 5 and stats["segment"] == "neighbours pairs"
    deduped, stats = read_positive_pairs(docs, positives="neighbours")  # documents: dedupe on, by anchor
    assert len(deduped) == 3 and stats["dropped_duplicates"] == 2


def test_title_pairs_skip_untitled_documents(docs, tmp_path):
    pairs, _ = read_positive_pairs(docs, positives="title", dedupe=False, max_sentences=1)
    assert pairs == [("Cells divide very often", "The first sentence is here. A second one follows it. Tiny.")]
    untitled = tmp_path / "untitled.jsonl"
    untitled.write_text(json.dumps({"text": "no title here at all"}) + "\n")
    with pytest.raises(DataError, match="needs documents with a title"):
        read_positive_pairs(untitled, positives="title")


def test_disk_corpus_with_pairs_is_refused():
    with pytest.raises(ConfigError, match="needs corpus: memory"):
        TrainConfig(model="m", train_file="f", output_dir="o", positives="title", corpus="disk").validate()


@pytest.fixture(scope="module")
def bert_without_dropout(tmp_path_factory):
    return make_tiny_bert(tmp_path_factory.mktemp("bert-no-dropout"), vocab=FILLER + [w for t in TOPICS for w in t],
                          dropout=0.0)


def test_the_step_takes_positives_as_the_second_view(bert_without_dropout):
    """Without dropout, the step's loss is the objective of (encoder(anchors), encoder(positives))."""
    torch.manual_seed(0)
    encoder, tokenizer, _ = load_encoder(str(bert_without_dropout), pooler="cls")
    encoder.train()
    pairs = [(f"t{k % 8}w1 t{k % 8}w2 the", f"t{k % 8}w3 a t{(k + 1) % 8}w4 t{k % 8}w5 t2w6") for k in range(8)]
    corpus = PairedCorpus(pairs, tokenizer, 16)
    batch = corpus.batch(np.arange(8))
    assert batch["positive_input_ids"].shape[1] != batch["input_ids"].shape[1]  # padded to a common width
    with torch.no_grad():
        anchors = encoder({"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]})
        positives = encoder({"input_ids": batch["positive_input_ids"],
                             "attention_mask": batch["positive_attention_mask"]})
        expected = contrastive_loss(anchors, positives, PRESETS["mixcse"]).loss
    step = PlainStep(DistContext(), encoder, torch.optim.SGD(encoder.parameters(), lr=0.0), PRESETS["mixcse"])
    assert float(step(batch).loss.loss) == pytest.approx(float(expected), rel=1e-5)


def test_training_with_neighbour_positives(tiny_bert, docs, tmp_path, synthetic_data):
    lines = synthetic_data["corpus"].read_text().splitlines()
    corpus = tmp_path / "abstracts.jsonl"
    corpus.write_text("".join(json.dumps({"title": lines[k], "text": ". ".join(lines[k + 1:k + 5]) + "."}) + "\n"
                              for k in range(0, 400, 5)))
    cfg = {"model": str(tiny_bert), "train_file": str(corpus), "output_dir": str(tmp_path / "run"),
           "positives": "neighbours", "batch_size": 16, "max_steps": 3, "log_steps": 1, "select_on": "none",
           "max_seq_length": 16}
    result = mixcse.train(cfg, progress=False)
    assert result.steps == 3
    loader_cfg = TrainConfig(**(cfg | {"output_dir": "o"}))
    paired, line = CorpusLoader(loader_cfg).open(load_encoder(str(tiny_bert))[1])
    assert isinstance(paired, PairedCorpus) and "neighbours pairs" in line and len(paired) == 80 * 4
