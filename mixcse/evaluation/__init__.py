"""Evaluation of sentence encoders: one evaluator per task family, shared by ``mixcse eval`` and checkpoint selection.

    evaluator.py   ``Evaluator``: name, primary metric, units to embed, score       embed.py  the one embedding pass
    tasks.py       the task registry: names, groups, ``build_evaluators``           runner.py ``evaluate`` and tables
    sts.py         ``STSEvaluator``: SentEval STS12-16, STS-B, SICK-R, STS-B dev    pairs.py  ``PairsEvaluator``
    transfer.py    ``TransferEvaluator``: the 7 SentEval probes                       analysis.py alignment/uniformity
    retrieval.py   ``RetrievalEvaluator``: BEIR (nDCG@10, recall@100, MTEB's numbers)
    probes.py      the probes' protocols and the two logistic regressions; probe_newton.py, probe_torch.py their
                   batched engines
    senteval.py    the SentEval files                                               selection.py  selection + guard
    modelcard.py   the model card of a trained or evaluated model

Numbers follow the protocol SimCSE/MixCSE report (STS12-16 'all' Spearman, STS-B/SICK-R test Spearman with cosine
and no regressor, transfer *test* accuracy of a logistic-regression probe), computed faster than SentEval by
embedding each distinct sentence once.

May import ``mixcse.utils``, ``mixcse.data`` and ``mixcse.models``; never ``mixcse.training`` (a test walks the
imports). Names are imported on first use, so that importing one submodule (e.g. ``selection`` in a training run)
does not pay for the others (scikit-learn, matplotlib).
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "probes": ("stratified_folds",),
    "senteval": ("DataError", "default_data_dir", "resolve_data_dir"),
    "embed": ("Embeddings", "embed_units"),
    "evaluator": ("Evaluator",),
    "runner": ("evaluate", "format_tables"),
    "tasks": ("ALL_TASKS", "STS_TASKS", "TRANSFER_TASKS", "build_evaluators", "expand_tasks"),
    "sts": ("STSEvaluator",),
    "pairs": ("PairsEvaluator",),
    "retrieval": ("RetrievalEvaluator",),
    "transfer": ("TransferEvaluator",),
    "analysis": ("AnalysisEvaluator", "alignment", "plot_alignment_uniformity", "plot_training_cosines",
                 "sphere_stats"),
    ".utils.files": ("to_jsonable",),  # mixcse.utils.files: one sanitiser for the whole package
}
_OWNER = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_OWNER)


def __getattr__(name: str):
    if name in _OWNER:
        return getattr(importlib.import_module(f".{_OWNER[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
