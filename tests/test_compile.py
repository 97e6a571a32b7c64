"""``compile: true`` computes the same step as eager: torch.compile (inductor, on CPU here) over static shapes."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import FILLER, TOPICS, make_tiny_bert, synthetic_sentence

from mixcse.models.encoder import load_encoder
from mixcse.training.config import TrainConfig
from mixcse.training.distributed import DistContext
from mixcse.training.step import make_step


@pytest.fixture(scope="module")
def bert_without_dropout(tmp_path_factory):
    # Dropout off: inductor draws its own dropout masks, so only a dropout-free step can be compared number by number.
    return make_tiny_bert(tmp_path_factory.mktemp("bert-no-dropout"), vocab=FILLER + [w for t in TOPICS for w in t],
                          dropout=0.0)


def batches(tokenizer, count: int = 3):
    rng = random.Random(0)
    for k in range(count):  # different lengths: the compiled step pads every batch to max_seq_length
        sentences = [synthetic_sentence(rng, (rng.randrange(8), rng.randrange(8)), n_words=3 + 3 * k)
                     for _ in range(8)]
        encoded = tokenizer(sentences, padding=True, return_tensors="pt", return_token_type_ids=False)
        yield {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}


def run(model_dir, compile: bool):
    torch.manual_seed(0)
    encoder, tokenizer, _ = load_encoder(str(model_dir), pooler="cls")
    encoder.train()
    optimizer = torch.optim.SGD(encoder.parameters(), lr=0.1)  # weights then measure gradients (see test_cached_step)
    cfg = TrainConfig(model="m", train_file="f", output_dir="o", batch_size=8, max_seq_length=24, compile=compile)
    start = {name: p.detach().clone() for name, p in encoder.named_parameters()}
    step = make_step(cfg, DistContext(), encoder, optimizer)
    losses = [float(step(batch).loss.loss) for batch in batches(tokenizer)]
    return losses, start, {name: p.detach().clone() for name, p in encoder.named_parameters()}


def test_compiled_step_equals_eager(bert_without_dropout):
    torch._dynamo.reset()
    eager_losses, start, eager_weights = run(bert_without_dropout, compile=False)
    compiled_losses, _, compiled_weights = run(bert_without_dropout, compile=True)
    assert compiled_losses == pytest.approx(eager_losses, rel=1e-5)
    moved = max((eager_weights[name] - w).abs().max().item() for name, w in start.items())
    assert moved > 1e-4  # the steps did change the model (float noise is ~1e-7), so equal weights mean equal updates
    for name, w in eager_weights.items():
        torch.testing.assert_close(compiled_weights[name], w, rtol=1e-5, atol=1e-6, msg=name)
