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
    evaluator.label              a short name for reports ("STS-B dev", "dev pairs AP")

A family is the evaluator class of one results section; it renders that section itself (classmethods), so that the
runner's tables, its settings and the model card loop over the families (``tasks.family``) and know none:

    Family.per_task              True: results[section][task] per evaluator (sts, transfer); else results[section]
    Family.protocol(evaluators, context) -> dict or None   what results["settings"][section] records
    Family.summarize(section)    figures over the section's tasks (the averages), added in place
    Family.table(section, settings, label) -> lines        the terminal's markdown (``mixcse eval``)
    Family.card(section, settings) -> lines                its part of the model card's "Evaluation"

An evaluator reads its data when it is built, so a bad file fails before anything is encoded. ``evaluate()``
(runner.py) embeds the units of all its evaluators in one pass and then scores each; a training run calls one
evaluator (its primary metric picks the checkpoint) and, for held-out files and the guard, a few more.
"""
from __future__ import annotations

import os
from typing import Any

from mixcse.evaluation.embed import Embeddings, embed_units
from mixcse.utils.tables import markdown_table

LABELS = {"STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R", "SST2": "SST-2"}


def label(task: str) -> str:
    """A task's column label ("STSBenchmark" -> "STS-B")."""
    return LABELS.get(task, task)


def task_keys(section: dict) -> list[str]:
    """The task entries of a per-task section, in the order they were filed (the canonical order)."""
    return [k for k, v in section.items() if k not in ("avg", "settings") and isinstance(v, dict)]


def task_row(section: dict, field: str, model: str | None = None, *, centred: bool = False) -> list[str]:
    """One markdown row of a per-task section: ``field`` of each task, then the section's average."""
    from mixcse.utils.tables import number

    tasks = task_keys(section)
    return result_row([label(t) for t in tasks] + ["Avg."],
                      [number(section[t].get(field)) for t in tasks] + [number(section.get("avg"))], model,
                      centred=centred)


def result_row(columns: list[str], values: list[str], model: str | None = None, *, centred: bool = False
               ) -> list[str]:
    """One markdown row of results, with a "Model" column first when ``model`` names the row."""
    head = (["Model"] if model is not None else []) + columns
    return markdown_table(head, [([model] if model is not None else []) + values], centred=centred)


class Evaluator:
    name: str = ""
    section: str = ""  # where ``evaluate()`` files the results: sts, transfer, analysis, retrieval, pairs
    primary_metric: str = ""
    greater_is_better: bool = True
    description: str = ""
    extra_metrics: tuple[str, ...] = ()  # further figures of the same pass that selection logs beside the primary
    per_task: bool = False
    start_won_hint: str = ""  # what a run that kept its start model on this selector should know (reports print it)

    @property
    def label(self) -> str:
        return self.name

    def worker_cost(self, embeddings: dict) -> tuple | None:
        """A sort key (costliest first) when this evaluator's scoring may run in a worker process of
        ``evaluate(workers=N)`` (it must then be picklable); None: it scores in the calling process."""
        return None

    @classmethod
    def protocol(cls, evaluators: list["Evaluator"], context: dict) -> dict | None:
        """``context``: the run's ``tasks``, ``mode``, ``kfold``, ``pairs_data``."""
        return None

    @classmethod
    def summarize(cls, section: dict) -> None:
        pass

    @classmethod
    def table(cls, section: dict, settings: dict, label: str | None = None) -> list[str]:
        return []

    @classmethod
    def card(cls, section: dict, settings: dict) -> list[str]:
        return []

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
