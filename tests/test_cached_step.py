"""The cached step (``mini_batch_size``) computes the gradients of one graph over the whole batch.

Reference: the literal computation with the same dropout masks, i.e. the chunks encoded in the same order from the
same RNG state, *with* a graph, concatenated, the loss of the whole batch, one backward pass. The cached step
must give the same loss, embedding gradient, parameter gradients and updated weights (fp32, 1e-5 relative), leave
the random generator where the reference leaves it (so a resumed run continues bit for bit), and, with dropout
off, equal the one-pass step outright.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import FILLER, TOPICS, make_tiny_bert, synthetic_sentence

from mixcse.losses import PRESETS, contrastive_loss
from mixcse.models.encoder import load_encoder
from mixcse.training.config import TrainConfig
from mixcse.training.distributed import DistContext
from mixcse.models.dropout import use_fast_dropout
from mixcse.training.step import CachedStep, PlainStep, make_step

pytestmark = pytest.mark.numeric  # rerun on other arithmetic paths (docs/development.md)

N, K = 16, 4


def make_batch(tokenizer, n: int = N, seed: int = 0) -> dict[str, torch.Tensor]:
    import random

    rng = random.Random(seed)
    sentences = [synthetic_sentence(rng, (rng.randrange(8), rng.randrange(8)), n_words=rng.randrange(3, 12))
                 for _ in range(n)]
    encoded = tokenizer(sentences, padding=True, truncation=True, max_length=16, return_tensors="pt",
                        return_token_type_ids=False)
    return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}


def setup(model_dir, fast_dropout: bool):
    torch.manual_seed(0)
    encoder, tokenizer, _ = load_encoder(str(model_dir), pooler="cls")
    if fast_dropout:
        assert use_fast_dropout(encoder) > 0
    encoder.train()
    return encoder, tokenizer


def sgd_step_gradients(encoder, before: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """With SGD at learning rate 1 the update is the gradient: before - after."""
    return {name: before[name] - p.detach() for name, p in encoder.named_parameters()}


def reference_step(encoder, optimizer, objective, batch, k: int):
    """Chunk by chunk with a graph (same order, same RNG draws as the cached step's first pass), one backward."""
    first, second = [], []
    for start in range(0, batch["input_ids"].shape[0], k):
        rows = {key: value[start:start + k] for key, value in batch.items()}
        pooled = encoder({key: torch.cat([v, v]) for key, v in rows.items()}, length_buckets=1)
        first.append(pooled[:k])
        second.append(pooled[k:])
    z1, z2 = torch.cat(first), torch.cat(second)
    z1.retain_grad()
    z2.retain_grad()
    out = contrastive_loss(z1, z2, objective)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return out.loss.detach(), torch.cat([z1.grad, z2.grad])


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def compare(model_dir, preset: str, fast_dropout: bool, k: int = K, loss_block_rows: int | None = None):
    objective = PRESETS[preset]
    results = []
    for cached in (True, False):
        encoder, tokenizer = setup(model_dir, fast_dropout)
        batch = make_batch(tokenizer)
        before = {name: p.detach().clone() for name, p in encoder.named_parameters()}
        optimizer = torch.optim.SGD(encoder.parameters(), lr=1.0)
        torch.manual_seed(123)
        if cached:
            step = CachedStep(DistContext(), encoder, optimizer, objective, mini_batch_size=k,
                              loss_block_rows=loss_block_rows)
            result = step(batch)
            loss, embedding_grad = result.loss.loss, result.embedding_grad
        else:
            loss, embedding_grad = reference_step(encoder, optimizer, objective, batch, k)
        results.append((loss, embedding_grad, sgd_step_gradients(encoder, before), torch.get_rng_state(),
                        {name: p.detach().clone() for name, p in encoder.named_parameters()}))
    (loss_c, emb_c, grads_c, rng_c, weights_c), (loss_r, emb_r, grads_r, rng_r, weights_r) = results
    assert float(loss_c) == pytest.approx(float(loss_r), rel=1e-6)
    assert relative_error(emb_c, emb_r) <= 1e-5
    checked = 0
    for name, g in grads_r.items():
        if g.norm() > 1e-8:
            assert relative_error(grads_c[name], g) <= 1e-5, name
            checked += 1
        else:  # the unused pooler gets none; attention key biases get rounding noise of a gradient that is zero
            assert (grads_c[name] - g).norm() <= 1e-8, name
        assert (relative_error(weights_c[name], weights_r[name]) <= 1e-5
                or (weights_c[name] - weights_r[name]).norm() <= 1e-8), name  # key biases start at zero
    assert checked > 10
    assert torch.equal(rng_c, rng_r)  # the generator continues as after the reference's forward passes


@pytest.fixture(scope="module")
def models(tiny_bert, tiny_modernbert):
    return {"bert": tiny_bert, "modernbert": tiny_modernbert}


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_cached_step_equals_one_graph_with_the_same_masks(models, preset, arch):
    compare(models[arch], preset, fast_dropout=False)


@pytest.mark.parametrize("preset", ["mixcse", "mixcse-bound", "mixcse-released"])
def test_loss_in_blocks_of_anchors_gives_the_same_step(models, preset):
    """Blocks of 5 anchors (not dividing the 16, nor aligned with the chunks of 4): the step of one graph still."""
    compare(models["bert"], preset, fast_dropout=False, loss_block_rows=5)


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_replay_covers_the_numpy_dropout_masks(models, arch):
    compare(models[arch], "mixcse", fast_dropout=True)


def test_a_wrong_replay_would_be_caught(tiny_bert, monkeypatch):
    """Without the RNG replay the second pass draws other masks: the comparison above must then fail."""
    import mixcse.training.step as step_module

    monkeypatch.setattr(step_module, "rng_restore", lambda snapshot, device: None)
    with pytest.raises(AssertionError):
        compare(tiny_bert, "mixcse", fast_dropout=True)


@pytest.fixture(scope="module")
def bert_without_dropout(tmp_path_factory):
    return make_tiny_bert(tmp_path_factory.mktemp("bert-no-dropout"), vocab=FILLER + [w for t in TOPICS for w in t],
                          dropout=0.0)


@pytest.mark.parametrize("preset", ["simcse", "mixcse"])
def test_without_dropout_cached_equals_the_one_pass_step(bert_without_dropout, preset):
    """No masks to share: the cached step (clipping, length buckets) equals the trainer's one-pass step. In float64,
    since the two steps pad and batch differently (other matmul shapes, so other fp32 rounding): any difference
    beyond 1e-9 is then a real one (an absolute 1e-10 for parameters whose gradient is exactly zero, such
    as attention key biases, which AdamW moves by rounding noise)."""
    weights = []
    for mini_batch_size in (None, K):
        encoder, tokenizer = setup(bert_without_dropout, fast_dropout=False)
        encoder.double()
        optimizer = torch.optim.AdamW(encoder.parameters(), lr=1e-3)
        cfg = TrainConfig(model="m", train_file="f", output_dir="o", loss=preset, batch_size=N,
                          mini_batch_size=mini_batch_size, length_buckets=2)
        step = make_step(cfg, DistContext(), encoder, optimizer)
        assert isinstance(step, CachedStep if mini_batch_size else PlainStep)
        losses = [float(step(make_batch(tokenizer, seed=s)).loss.loss) for s in range(3)]
        weights.append((losses, {n: p.detach().clone() for n, p in encoder.named_parameters()}))
    (loss_plain, w_plain), (loss_cached, w_cached) = weights
    assert loss_cached == pytest.approx(loss_plain, rel=1e-9)
    for name, w in w_plain.items():
        torch.testing.assert_close(w_cached[name], w, rtol=1e-9, atol=1e-10, msg=name)


def test_chunk_must_divide_the_batch(tiny_bert):
    encoder, tokenizer = setup(tiny_bert, fast_dropout=False)
    step = CachedStep(DistContext(), encoder, torch.optim.SGD(encoder.parameters(), lr=0.1), PRESETS["mixcse"],
                      mini_batch_size=5)
    with pytest.raises(ValueError, match="does not divide"):
        step(make_batch(tokenizer))
    assert np.isfinite(float(step(make_batch(tokenizer, n=15)).loss.loss))
