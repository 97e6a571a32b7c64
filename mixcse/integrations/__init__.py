"""Bridges to other libraries. Importing this package imports none of them; the names below load on first use.

- ``MixCSELoss`` (``mixcse.integrations.sentence_transformers``): MixCSE/SimCSE as a sentence-transformers loss.
- ``LayerAveragePooling`` (``mixcse.integrations.st_modules``): the sentence-transformers module of the
  ``avg_first_last`` and ``avg_top2`` poolers.

Both need the ``st`` extra: ``pip install 'mixcse[st]'`` (training with ``SentenceTransformerTrainer`` also needs
``datasets`` and ``accelerate``). May import the model, losses and model card; never training or the CLI.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "MixCSELoss": "mixcse.integrations.sentence_transformers",
    "LayerAveragePooling": "mixcse.integrations.st_modules",
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
