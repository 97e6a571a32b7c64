"""The encoder's length-bucketed forward computes the same function as one padded pass."""

from __future__ import annotations

import pytest
import torch
from conftest import STAND_IN, TOPICS, needs_example_data

from mixcse.models.encoder import load_encoder

WORDS = [w for topic in TOPICS for w in topic]


def varied_sentences(n: int) -> list[str]:
    # lengths 1..n words, shuffled so that sorting has work to do
    order = torch.randperm(n, generator=torch.Generator().manual_seed(0)).tolist()
    return [" ".join(WORDS[(k * 7 + j) % len(WORDS)] for j in range(k + 1)) for k in order]


def outputs_and_grads(encoder, batch, buckets: int):
    encoder.zero_grad(set_to_none=True)
    pooled = encoder(batch, use_head=encoder.head is not None, length_buckets=buckets)
    # a loss that weights every row and dimension differently, so a permuted row would show
    weights = torch.linspace(-1, 1, pooled.numel()).reshape(pooled.shape)
    (pooled * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in encoder.named_parameters() if p.grad is not None}
    return pooled.detach(), grads


def check_bucketed_equals_single_pass(path, pooler: str, n: int = 21):
    encoder, tokenizer, _ = load_encoder(str(path), pooler=pooler)
    encoder.eval()  # dropout off: both sides must be deterministic to compare
    batch = dict(tokenizer(varied_sentences(n), padding=True, truncation=True, max_length=32,
                           return_tensors="pt", return_token_type_ids=False))
    assert batch["attention_mask"].sum(1).unique().numel() > 4  # the batch really has mixed lengths
    ref, ref_grads = outputs_and_grads(encoder, batch, 1)
    for buckets in (2, 4):
        out, grads = outputs_and_grads(encoder, batch, buckets)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        assert grads.keys() == ref_grads.keys()
        for name in ref_grads:
            atol = 1e-4 * ref_grads[name].abs().max().item() + 1e-6
            torch.testing.assert_close(grads[name], ref_grads[name], atol=atol, rtol=0,
                                       msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("pooler", ["cls", "cls_before_pooler", "avg", "avg_first_last"])
def test_length_buckets_tiny_bert(tiny_bert, pooler):
    check_bucketed_equals_single_pass(tiny_bert, pooler)


@needs_example_data(STAND_IN)
@pytest.mark.parametrize("pooler", ["cls", "avg"])
def test_length_buckets_modernbert_stand_in(pooler):
    check_bucketed_equals_single_pass(STAND_IN, pooler)


def test_small_batches_fall_back_to_one_pass(tiny_bert, monkeypatch):
    encoder, tokenizer, _ = load_encoder(str(tiny_bert), pooler="avg")
    encoder.eval()
    passes = []
    real_pool = type(encoder)._pool

    def counting_pool(self, batch, use_head):
        passes.append(batch["input_ids"].shape)
        return real_pool(self, batch, use_head)

    monkeypatch.setattr(type(encoder), "_pool", counting_pool)
    small = dict(tokenizer(varied_sentences(3), padding=True, return_tensors="pt", return_token_type_ids=False))
    with torch.no_grad():
        torch.testing.assert_close(encoder(small, length_buckets=4), encoder(small))
    # fewer than two rows per bucket: one padded pass over the whole batch, as without buckets
    assert passes == [small["input_ids"].shape] * 2
    passes.clear()
    large = dict(tokenizer(varied_sentences(8), padding=True, return_tensors="pt", return_token_type_ids=False))
    with torch.no_grad():
        encoder(large, length_buckets=4)
    assert [shape[0] for shape in passes] == [2, 2, 2, 2]  # and the bucketed path where there are enough rows


def test_half_precision_checkpoint_trains_in_float32(tiny_bert, tmp_path):
    """transformers 5 would load an fp16 checkpoint in fp16; mixcse keeps float32 master weights."""
    import shutil

    from transformers import AutoModel

    half = tmp_path / "half"
    shutil.copytree(tiny_bert, half)
    AutoModel.from_pretrained(str(tiny_bert)).half().save_pretrained(str(half))
    assert AutoModel.from_pretrained(str(half)).embeddings.word_embeddings.weight.dtype == torch.float16
    encoder, _, _ = load_encoder(str(half), pooler="cls")
    assert {p.dtype for p in encoder.parameters()} == {torch.float32}
