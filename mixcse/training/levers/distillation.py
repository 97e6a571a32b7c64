"""``distill_weight``: the loss adds this weight times the KL divergence of the student's in-batch similarities
from the start model's (``mixcse.losses.distillation_loss``), so that the adapted encoder forgets less."""
from __future__ import annotations

import numpy as np
import torch

from mixcse.errors import ConfigError
from mixcse.losses import distillation_loss
from mixcse.training.levers.base import Lever, register_lever


@register_lever
class Distillation(Lever):
    name = "distillation"
    keys = {"distill_weight": (float | None, None)}

    @classmethod
    def active(cls, cfg) -> bool:
        return bool(cfg.distill_weight)

    @classmethod
    def check(cls, cfg) -> None:
        value = cfg.distill_weight
        if value is None:
            return
        if value < 0:
            raise ConfigError(f"config key 'distill_weight' must be >= 0, got {value}")
        if value and cfg.corpus == "disk":
            raise ConfigError("distill_weight needs corpus: memory (the start model embeds the training text once)")
        if value and cfg.loss == "mixcse-released":
            raise ConfigError("distill_weight applies to the paper's objectives, not mixcse-released")

    def prepare(self, start) -> None:
        self.embeddings = torch.from_numpy(np.ascontiguousarray(start.embeddings(), dtype=np.float32))

    def signals(self, indices: np.ndarray) -> dict:
        return {"teacher": self.embeddings[torch.as_tensor(np.asarray(indices, dtype=np.int64))]}

    def loss_term(self, z1, z2, signals: dict, objective, rows):
        kd = distillation_loss(z1, z2, signals["teacher"].to(z1.device), objective.temperature, rows)
        return self.cfg.distill_weight * kd, {"distill_loss": kd.detach()}

    def report(self) -> dict:
        return {"weight": self.cfg.distill_weight,
                "text": f"the loss added {self.cfg.distill_weight:g} x KL(start model || student) of the in-batch "
                        f"similarities"}
