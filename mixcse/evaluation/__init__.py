"""SentEval-protocol evaluation of sentence encoders: STS, transfer probes and the embedding-space analysis.

Numbers follow the protocol SimCSE/MixCSE report (STS12-16 'all' Spearman, STS-B/SICK-R test Spearman with
cosine and no regressor, transfer *test* accuracy of a logistic-regression probe), computed faster than
SentEval by encoding each distinct sentence once. See `evaluate` and `format_tables`.
"""
from .analysis import alignment, plot_alignment_uniformity, plot_training_cosines, sphere_stats
from .classifiers import stratified_folds
from .data import STS_TASKS, TRANSFER_TASKS, DataError, default_data_dir, resolve_data_dir
from .encoding import EmbeddingCache, encode_unique, resolve_encoder
from ..jsonfiles import to_jsonable
from .runner import ALL_TASKS, evaluate, expand_tasks, format_tables, stsb_dev_spearman

__all__ = [
    "evaluate", "format_tables", "stsb_dev_spearman", "resolve_encoder", "default_data_dir", "resolve_data_dir",
    "DataError", "plot_alignment_uniformity", "plot_training_cosines", "alignment", "sphere_stats",
    "stratified_folds", "encode_unique", "EmbeddingCache", "expand_tasks", "to_jsonable",
    "STS_TASKS", "TRANSFER_TASKS", "ALL_TASKS",
]
