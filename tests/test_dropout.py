"""FastDropout is nn.Dropout with another random stream: same distribution, scaling, gradient and eval behaviour."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from mixcse.models.encoder import load_encoder
from mixcse.models.dropout import FastDropout, use_fast_dropout


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_drop_rate_and_scaling(p):
    torch.manual_seed(0)
    x = torch.rand(2_000_000) + 0.5  # no zeros, so a zero output means a dropped element
    drop = FastDropout(p).train()
    y = drop(x)
    dropped = y == 0
    n = x.numel()
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(dropped.float().mean().item() - drop.effective_p) < 5 * sigma
    assert abs(drop.effective_p - p) <= 0.5 / 65536
    torch.testing.assert_close(y[~dropped], x[~dropped] / (1 - drop.effective_p))
    # no structure along the tensor: the drop rate of each half and of odd/even positions agrees
    for part in (dropped[: n // 2], dropped[n // 2:], dropped[::2], dropped[1::2]):
        assert abs(part.float().mean().item() - drop.effective_p) < 5 * sigma * math.sqrt(2)


def test_gradient_is_the_mask_scaled():
    torch.manual_seed(1)
    x = (torch.rand(64, 32) + 0.5).requires_grad_()
    drop = FastDropout(0.1).train()
    y = drop(x)
    y.sum().backward()
    expected = (y != 0).float() / (1 - drop.effective_p)
    torch.testing.assert_close(x.grad, expected.detach())


def test_masks_follow_torch_seed():
    drop = FastDropout(0.1).train()
    x = torch.ones(10_000)
    torch.manual_seed(3)
    a, b = drop(x), drop(x)
    torch.manual_seed(3)
    a2 = drop(x)
    assert torch.equal(a, a2)  # torch.manual_seed (and a restored RNG state) fixes the masks
    assert not torch.equal(a, b)  # successive calls draw fresh masks


def test_eval_mode_and_zero_p_are_identity():
    x = torch.randn(100)
    assert torch.equal(FastDropout(0.1).eval()(x), x)
    assert torch.equal(FastDropout(0.0).train()(x), x)
    with pytest.raises(ValueError):
        FastDropout(1.0)


def test_use_fast_dropout_swaps_modules_not_weights(tiny_bert):
    encoder, tokenizer, _ = load_encoder(str(tiny_bert), pooler="cls")
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    n_dropout = sum(type(m) is nn.Dropout and m.p > 0 for m in encoder.modules())
    encoder.eval()
    batch = dict(tokenizer(["t0w1 t1w2 the", "t2w3 a t4w4 t5w5"], padding=True, return_tensors="pt",
                           return_token_type_ids=False))
    with torch.no_grad():
        ref = encoder(batch)
    assert n_dropout > 0 and use_fast_dropout(encoder) == n_dropout
    assert not any(type(m) is nn.Dropout and m.p > 0 for m in encoder.modules())
    assert sum(isinstance(m, FastDropout) for m in encoder.modules()) == n_dropout
    assert encoder.state_dict().keys() == before.keys()
    with torch.no_grad():
        torch.testing.assert_close(encoder(batch), ref)  # eval mode: unchanged
    encoder.train()
    with torch.no_grad():
        assert not torch.allclose(encoder(batch), encoder(batch))  # training: dropout is live
