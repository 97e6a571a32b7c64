"""mixcse: unsupervised sentence encoders with MixCSE (Zhang et al., AAAI 2022) and SimCSE.

Names are imported on first use, so that a torch-free path (the ONNX backend, ``mixcse.models.onnx_backend``) does not
import torch."""

import importlib

_EXPORTS = {
    "training.config": ("TrainConfig", "load_recipe"),
    "models.sentence_encoder": ("SentenceEncoder",),
    "errors": ("MixCSEError",),
    "losses": ("PRESETS", "ContrastiveObjective", "contrastive_loss"),
    "training.trainer": ("train",),
}
_OWNER = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = ["TrainConfig", "load_recipe", "SentenceEncoder", "MixCSEError", "PRESETS", "ContrastiveObjective",
           "contrastive_loss", "train"]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _OWNER:
        return getattr(importlib.import_module(f".{_OWNER[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
