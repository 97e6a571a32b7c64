"""Precision, the optimiser and the learning-rate schedule of a training run."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from mixcse.errors import ConfigError
from mixcse.models.dropout import use_fast_dropout
from mixcse.training.config import TrainConfig


def cpu_supports_bf16() -> bool:
    """AVX512-BF16 or AMX: there bf16 matmuls are native and faster than fp32."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def resolve_precision(precision: str, device: torch.device) -> str:
    if precision == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        if cpu_supports_bf16():
            return "bf16"
        print("note: precision auto -> fp32: this CPU has neither AVX512-BF16 nor AMX-BF16, where bf16 would be "
              "slower", file=sys.stderr)
        return "fp32"
    if precision == "fp16" and device.type != "cuda":
        raise ConfigError("precision fp16 needs a CUDA device; on CPU use bf16 or fp32")
    if precision == "bf16" and device.type == "cpu" and not cpu_supports_bf16():
        print("warning: precision bf16 on a CPU with neither AVX512-BF16 nor AMX-BF16: bf16 is emulated here and "
              "many times slower than fp32 (precision: auto picks fp32 on such a CPU)", file=sys.stderr)
    return precision


def optimizer_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """No decay on biases and norm weights (the convention of BERT fine-tuning)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if p.ndim < 2 or "norm" in name.lower() else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def prepare_for_training(encoder: torch.nn.Module, cfg: TrainConfig, device: torch.device) -> None:
    """Move to the device; on CPU, numpy-drawn dropout masks (``fast_cpu_dropout``, see mixcse/models/dropout.py),
    except for a compiled encoder, whose graph would break at every numpy call (torch's dropout compiles)."""
    encoder.to(device)
    if cfg.fast_cpu_dropout and device.type == "cpu" and not cfg.compile:
        use_fast_dropout(encoder)


def build_optimizer(encoder: torch.nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    """AdamW with the fused kernel where torch has one (CPU, CUDA): one pass over all parameters, the same update
    as the for-each kernel up to rounding, 7x faster on CPU (benchmarks/results/profile_step.json, "adamw")."""
    return torch.optim.AdamW(optimizer_groups(encoder, cfg.weight_decay), lr=cfg.learning_rate,
                             fused=device.type in ("cpu", "cuda"))


def linear_schedule(total_steps: int, warmup_steps: int):
    def factor(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return factor
