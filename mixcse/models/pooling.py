"""Every pooler, written once, for torch tensors and numpy arrays alike (no torch import: the onnx backend uses it).

    cls, cls_before_pooler   the first token's vector ([CLS]); ``cls`` adds the MLP head after pooling
    avg                      the mean of the last layer over the real tokens
    avg_first_last, avg_top2 the mean over the real tokens of two layers averaged (``LAYER_POOLERS``)

``hidden`` is (batch, tokens, d); ``mask`` the (batch, tokens) attention mask (1 = a real token). Only methods that
torch tensors and numpy arrays share are used (``[..., None]``, ``sum``, ``clip(min=)``), with the mask cast to
the hidden states' dtype (``.to`` on a tensor, ``.astype`` on an array), so both give the same numbers.
"""

from __future__ import annotations

from typing import Sequence

from mixcse.models.formats import LAYER_POOLERS

FIRST_TOKEN = ("cls", "cls_before_pooler")


def _like(mask, hidden):
    """``mask`` in ``hidden``'s dtype, with a trailing axis to broadcast over the hidden size."""
    mask = mask[..., None]
    return mask.to(hidden.dtype) if hasattr(mask, "to") else mask.astype(hidden.dtype)


def first_token(hidden):
    return hidden[:, 0]


def masked_mean(hidden, mask):
    """The mean of each row's real tokens (a row without any gives zeros)."""
    mask = _like(mask, hidden)
    return (hidden * mask).sum(1) / mask.sum(1).clip(min=1.0)


def two_layer_mean(first, second, mask):
    """``masked_mean`` of two layers averaged token by token."""
    return masked_mean((first + second) / 2.0, mask)


def pool(pooler: str, hidden_states, mask):
    """One vector per row. ``hidden_states``: the last layer, or for a layer-averaging pooler the sequence of
    every layer's hidden states as Hugging Face returns them (0 = the embedding output)."""
    if pooler in LAYER_POOLERS:
        first, second = LAYER_POOLERS[pooler]
        layers: Sequence = hidden_states
        return two_layer_mean(layers[first], layers[second], mask)
    if pooler in FIRST_TOKEN:
        return first_token(hidden_states)
    if pooler == "avg":
        return masked_mean(hidden_states, mask)
    raise ValueError(f"unknown pooler {pooler!r}")
