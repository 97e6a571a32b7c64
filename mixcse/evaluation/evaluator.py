"""``Evaluator``: one task family's scoring of a sentence encoder, the unit of ``mixcse eval`` and of checkpoint
selection alike (sentence-transformers' ``SentenceEvaluator`` shape).

    evaluator.name               the key of its results (a task name, or a selection metric such as "stsb_dev")
    evaluator.primary_metric     the key of its headline number in the results (e.g. "spearman", "ap", "ndcg@10")
    evaluator.greater_is_better  True for every built-in evaluator (correlations, precision, nDCG, accuracy)
    evaluator.description        one line for logs and the model card: metric, data, split
    evaluator.units()            {unit: sentences} to embed (``embed.embed_units``), read when it was built
    evaluator.score(embeddings, encoder) -> results dict
    evaluator(encoder, batch_size=64, cache_dir=None) -> results dict   (embeds its units, then scores)
    evaluator.primary(results) -> float; evaluator.extras(results) -> the further figures selection logs

An evaluator reads its data when it is built, so a bad file fails before anything is encoded. ``evaluate()``
(runner.py) embeds the units of all its evaluators in one pass and then scores each; a training run calls one
evaluator (its primary metric picks the checkpoint) and, for held-out files and the guard, a few more.
"""
from __future__ import annotations

import os
from typing import Any

from mixcse.evaluation.embed import Embeddings, embed_units


class Evaluator:
    name: str = ""
    section: str = ""  # where ``evaluate()`` files the results: sts, transfer, analysis, retrieval, pairs
    primary_metric: str = ""
    greater_is_better: bool = True
    description: str = ""
    extra_metrics: tuple[str, ...] = ()  # further figures of the same pass that selection logs beside the primary

    def units(self) -> dict[str, list[str]]:
        """The sentences to embed, per unit; an evaluator that encodes in its own way (retrieval) returns {}."""
        return {}

    def score(self, embeddings: dict[str, Embeddings], encoder: Any = None, *, batch_size: int = 64,
              cache_dir: str | os.PathLike | None = None) -> dict:
        raise NotImplementedError

    def __call__(self, encoder: Any, *, batch_size: int = 64, cache_dir: str | os.PathLike | None = None) -> dict:
        embeddings, _ = embed_units(encoder, self.units(), batch_size=batch_size, cache_dir=cache_dir)
        return self.score(embeddings, encoder, batch_size=batch_size, cache_dir=cache_dir)

    def primary(self, results: dict) -> float:
        return float(results[self.primary_metric])

    def extras(self, results: dict) -> dict[str, float]:
        return {k: float(results[k]) for k in self.extra_metrics if k in results}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"
