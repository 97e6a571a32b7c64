"""Dropout with cheaper random numbers, for CPU training.

Dropout is what makes SimCSE's two views, so every training step draws a keep/drop decision for every hidden
activation of both views. On CPU, torch draws them with ``bernoulli_`` at ~8 ns per element; in a profile of the
stand-in's training step that was 30% of the step (python -m benchmarks.speed profile). ``FastDropout`` draws the same
decisions from 16-bit uniform integers made by numpy's PCG64 generator (~2 ns per element) and is otherwise
``nn.Dropout``: in training it zeroes each element independently with probability p and scales the rest by
1/(1-p); in eval mode it is the identity.

Two differences, both documented where the option is set (TrainConfig.fast_cpu_dropout):
  * p is rounded to a multiple of 1/65536 (p = 0.1 drops with probability 6554/65536 = 0.100006);
  * the random stream is not torch's: each call seeds a fresh generator from torch's default generator, so
    ``torch.manual_seed`` and the trainer's saved RNG state still determine every mask (runs are reproducible and
    resume exactly), but the masks differ from those ``nn.Dropout`` would draw.
Attention-probability dropout inside scaled_dot_product_attention is not an ``nn.Dropout`` module and stays
torch's.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

_LEVELS = 1 << 16


class FastDropout(nn.Module):
    """``nn.Dropout(p)`` with the keep mask drawn by numpy (CPU tensors; other devices use torch's dropout).

    Input: any tensor x. Output: in training, x * keep / (1 - p') with keep ~ Bernoulli(1 - p') independently per
    element, p' = round(p * 65536) / 65536; in eval mode, x. Gradient: the same mask and scale."""

    def __init__(self, p: float):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p
        self.drop_levels = round(p * _LEVELS)  # an element is dropped when its draw (0..65535) is below this
        self.scale = 1.0 / (1.0 - self.drop_levels / _LEVELS)

    @property
    def effective_p(self) -> float:
        return self.drop_levels / _LEVELS

    def keep_mask(self, shape: torch.Size) -> torch.Tensor:
        seed = int(torch.randint(0, 2**62, (1,)).item())  # from torch's generator: manual_seed governs the masks
        half = _LEVELS >> 1  # uniform int16 draws: the same 65536 levels, shifted by 2^15
        draws = np.random.Generator(np.random.PCG64(seed)).integers(-half, half, size=tuple(shape), dtype=np.int16)
        return torch.from_numpy(draws) >= self.drop_levels - half

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.drop_levels == 0:
            return x
        if x.device.type != "cpu":  # accelerators draw dropout masks fast enough
            return nn.functional.dropout(x, self.p, training=True)
        return x * self.keep_mask(x.shape) * self.scale

    def extra_repr(self) -> str:
        return f"p={self.p} (effective {self.effective_p:.6f})"


def use_fast_dropout(module: nn.Module) -> int:
    """Replace every ``nn.Dropout`` (exactly that class, p > 0) inside ``module`` by ``FastDropout`` of the same
    p. Returns how many were replaced. Parameters and buffers are untouched, so saving is unaffected."""
    targets = [(name, child) for name, child in module.named_modules()
               if type(child) is nn.Dropout and child.p > 0]
    for name, child in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = module.get_submodule(parent_name) if parent_name else module
        replacement = FastDropout(child.p)
        replacement.train(child.training)
        setattr(parent, attr, replacement)
    return len(targets)
