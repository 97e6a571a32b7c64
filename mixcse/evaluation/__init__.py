"""SentEval-protocol evaluation of sentence encoders: STS, transfer probes and the embedding-space analysis.

Numbers follow the protocol SimCSE/MixCSE report (STS12-16 'all' Spearman, STS-B/SICK-R test Spearman with
cosine and no regressor, transfer *test* accuracy of a logistic-regression probe), computed faster than
SentEval by encoding each distinct sentence once. See `evaluate` and `format_tables`.

    senteval.py    the SentEval files (tasks, readers)     sts.py, transfer.py   the two task families
    classifiers.py, batched_logreg.py, batched_probe.py   the transfer probes (sklearn and the papers' PyTorch probe)
    encoding.py    encode each distinct sentence once       analysis.py  alignment/uniformity and plots
    retrieval.py   BEIR retrieval (nDCG@10, recall@100)     pairs.py     pair classification (AP, F1) and graded pairs
    selection.py   the checkpoint selectors training uses   runner.py    ``evaluate``: tasks -> results and tables
    download.py    fetching SentEval data

May import ``mixcse.utils``, ``mixcse.data`` and the model (``sentence_encoder``, ``onnx_backend``, ``search``);
never ``mixcse.training`` (a test walks the imports). Names are imported on first use, so that importing one
submodule (e.g. ``selection`` in a training run) does not pay for the others (scikit-learn, matplotlib).
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "analysis": ("alignment", "plot_alignment_uniformity", "plot_training_cosines", "sphere_stats"),
    "classifiers": ("stratified_folds",),
    "senteval": ("DataError", "default_data_dir", "resolve_data_dir"),
    "encoding": ("EmbeddingCache", "encode_unique", "resolve_encoder"),
    "runner": ("ALL_TASKS", "evaluate", "expand_tasks", "format_tables"),
    ".utils.files": ("to_jsonable",),  # mixcse.utils.files: one sanitiser for the whole package
    ".utils.tables": ("STS_TASKS", "TRANSFER_TASKS"),
    "selection": ("stsb_dev_spearman",),
}
_OWNER = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_OWNER)


def __getattr__(name: str):
    if name in _OWNER:
        return getattr(importlib.import_module(f".{_OWNER[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
