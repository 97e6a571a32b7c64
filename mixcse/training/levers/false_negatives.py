"""``false_negative_threshold``: in-batch pairs that the start model puts at cosine >= the threshold are neither
negatives nor mixed negatives for each other (``exclude``, the contrastive loss's mask: mixcse/losses.py)."""
from __future__ import annotations

import numpy as np
import torch

from mixcse.errors import ConfigError
from mixcse.training.levers.base import Lever, register_lever


@register_lever
class FalseNegatives(Lever):
    name = "false_negatives"
    keys = {"false_negative_threshold": (float | None, None)}

    @classmethod
    def active(cls, cfg) -> bool:
        return cfg.false_negative_threshold is not None

    @classmethod
    def check(cls, cfg) -> None:
        value = cfg.false_negative_threshold
        if value is None:
            return
        if not -1.0 <= value <= 1.0:
            raise ConfigError(f"config key 'false_negative_threshold' is a cosine similarity, in [-1, 1]; got {value}")
        if cfg.corpus == "disk":
            raise ConfigError("false_negative_threshold needs corpus: memory (the start model embeds the training "
                              "text once)")
        if cfg.loss == "mixcse-released":
            raise ConfigError("false_negative_threshold applies to the paper's objectives, not mixcse-released")

    def prepare(self, start) -> None:
        self.embeddings = torch.from_numpy(np.ascontiguousarray(start.embeddings(), dtype=np.float32))
        self.masked = 0

    def signals(self, indices: np.ndarray) -> dict:
        t = self.embeddings[torch.as_tensor(np.asarray(indices, dtype=np.int64))]
        return {"exclude": (t @ t.T) >= self.cfg.false_negative_threshold}

    def report(self) -> dict:
        return {"threshold": self.cfg.false_negative_threshold,
                "text": f"in-batch pairs at start-model cosine >= {self.cfg.false_negative_threshold:g} were not "
                        f"negatives for each other"}
