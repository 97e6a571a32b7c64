"""Checkpoint selection: score the model being trained on the user's own development data.

A selector is what ``mixcse.train`` calls at every evaluation (and at step 0: the starting model is always a
candidate, so a run never ships a model worse on the selection metric than the one it started from):

    selector.name               the metric's key in metrics.jsonl and summary.json, e.g. "stsb_dev"
    selector.greater_is_better  True for every built-in selector (correlations, nDCG)
    selector.description        one line for the log and the model card: metric, data, split
    selector(encoder) -> Selection(score, extras)

``encoder`` is a ``mixcse.SentenceEncoder`` over the model in training: its test-time pooler and inference length,
so a checkpoint is judged as it will be used. ``extras`` holds further figures of the same pass (e.g. recall@100).

Built-in selectors (``select_on`` in the training config):
  * ``stsb_dev``  STS-B dev Spearman x100 of cosine similarities (SimCSE's and MixCSE's selection).
  * ``retrieval`` nDCG@10 x100 on a fixed, seeded sub-corpus of a BEIR dataset's non-test split
                  (``mixcse.evaluation.retrieval.dev_subset``): the split's relevant documents plus a sample of
                  the others, so that a selection pass costs seconds, not the minutes of the whole corpus.
  * ``pairs``     a labelled file of (sentence1, sentence2, label): cosine average precision x100 when the labels
                  are 0/1 (duplicate or not), else Spearman x100 of the cosines (``mixcse.evaluation.pairs``).
  * ``none``      no selection: ``best/`` is the last step.
Only this module's own imports are paid by a training run (numpy, scipy; scikit-learn only for ``pairs``).
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np

from mixcse.evaluation import senteval as D
from mixcse.evaluation import sts as S
from mixcse.evaluation.encoding import encode_raw

SELECT_ON = ("stsb_dev", "retrieval", "pairs", "none")  # the built-in selectors (config key select_on)


@dataclass
class Selection:
    score: float
    extras: dict[str, float] = field(default_factory=dict)


class Selector(Protocol):
    name: str
    greater_is_better: bool
    description: str

    def __call__(self, encoder: Any) -> Selection: ...


def better(new: float | None, old: float | None, greater_is_better: bool = True) -> bool:
    """Whether score ``new`` beats ``old`` strictly; a missing or NaN score never wins against a real one."""
    def rank(x):
        if x is None or (isinstance(x, float) and math.isnan(x)):
            return -math.inf
        return x if greater_is_better else -x

    return rank(new) > rank(old)


class _Unique:
    """Embed each distinct sentence once per selection pass."""

    def __init__(self, encoder, batch_size: int):
        self.encoder, self.batch_size, self.cache = encoder, batch_size, {}

    def __call__(self, sentences: list[str]) -> np.ndarray:
        missing = [s for s in dict.fromkeys(sentences) if s not in self.cache]
        if missing:
            self.cache.update(zip(missing, encode_raw(self.encoder, missing, self.batch_size)))
        return np.stack([self.cache[s] for s in sentences])


# ------------------------------------------------------------------------------------------------ STS-B dev
@functools.lru_cache(maxsize=8)
def _stsb_dev(path: str, mtime_ns: int):
    ps = D.load_stsb(Path(path), "dev")
    unique = list(dict.fromkeys(ps.a + ps.b))
    pos = {s: i for i, s in enumerate(unique)}
    ia = np.asarray([pos[s] for s in ps.a], dtype=np.int64)
    ib = np.asarray([pos[s] for s in ps.b], dtype=np.int64)
    return unique, ia, ib, ps.scores


def stsb_dev_spearman(encode_fn, data_dir=None, batch_size: int = 64) -> float:
    """STS-B dev Spearman x100; the parsed file is cached per process."""
    ddir = D.resolve_data_dir(data_dir)
    f = ddir / "STS" / "STSBenchmark" / "sts-dev.csv"
    if not f.is_file():
        raise D.DataError(f"{f}: file not found")
    unique, ia, ib, gold = _stsb_dev(str(ddir.resolve()), f.stat().st_mtime_ns)
    emb = encode_raw(encode_fn, unique, batch_size)
    return S.spearman(S.row_cosine(emb[ia], emb[ib]), gold)


def find_stsb_dev(data_dir: str | None) -> Path | None:
    """The SentEval folder holding STS-B dev, from ``data_dir`` or the default search; None when there is none."""
    try:
        ddir = D.resolve_data_dir(data_dir)
    except D.DataError:
        return None
    return ddir if (ddir / "STS" / "STSBenchmark" / "sts-dev.csv").is_file() else None


class StsbDevSelector:
    name = "stsb_dev"
    greater_is_better = True

    def __init__(self, data_dir: Path, batch_size: int = 128, analysis: bool = False):
        self.data_dir, self.batch_size, self.analysis = Path(data_dir), batch_size, analysis
        self.description = f"STS-B dev Spearman x100 ({self.data_dir / 'STS/STSBenchmark/sts-dev.csv'})"

    def __call__(self, encoder) -> Selection:
        embed = _Unique(encoder, self.batch_size)
        score = float(stsb_dev_spearman(embed, self.data_dir, batch_size=self.batch_size))
        extras: dict[str, float] = {}
        if self.analysis:  # the paper's embedding-space figures on the same embeddings
            from mixcse.evaluation.analysis import analyse

            stats = analyse({"dev": D.load_stsb(self.data_dir, "dev")}, embed)
            extras = {k: stats[k] for k in ("alignment", "uniformity", "max_angle", "mean_angle")}
        return Selection(score, extras)


# ------------------------------------------------------------------------------------------------ labelled pairs
class PairsSelector:
    """Binary labels (duplicate or not): cosine average precision x100, MTEB PairClassification's main metric;
    graded labels: Spearman x100 of the cosines. Accuracy / F1 at their best thresholds ride along as extras."""

    greater_is_better = True

    def __init__(self, path: str | Path, batch_size: int = 128):
        from mixcse.evaluation.pairs import is_binary, read_pairs

        self.pairs, self.batch_size = read_pairs(path), batch_size
        self.binary = is_binary(self.pairs.scores)
        self.name = "pairs_ap" if self.binary else "pairs_spearman"
        what = "cosine average precision" if self.binary else "Spearman of cosine similarities"
        self.description = f"{what} x100 on {len(self.pairs)} labelled pairs ({path})"

    def __call__(self, encoder) -> Selection:
        from mixcse.evaluation.pairs import score_pair_sets

        (scores,) = score_pair_sets(encoder, [self.pairs], self.batch_size).values()
        extras = {k: float(scores[k]) for k in ("accuracy", "f1") if k in scores}
        return Selection(float(scores[scores["main"]]), extras)


# ------------------------------------------------------------------------------------------------ retrieval
class RetrievalSelector:
    metric = "ndcg@10"
    greater_is_better = True

    def __init__(self, data_dir: str | Path, split: str = "train", *, batch_size: int = 64,
                 n_distractors: int | None = None, seed: int = 0):
        from mixcse.evaluation import retrieval as R

        if split == "test":
            raise D.DataError("selection on a test split is refused: select on train or dev, report on test")
        full = R.load_beir(data_dir, split)
        kwargs = {} if n_distractors is None else {"n_distractors": n_distractors}
        self.data = R.dev_subset(full, seed=seed, **kwargs)
        self.batch_size = batch_size
        self.name = f"{split}_{self.metric}"
        self.description = (f"nDCG@10 x100 on {Path(data_dir).name} {split} ({len(self.data.queries)} queries, "
                            f"{len(self.data.documents)} of {len(full.documents)} documents: the relevant ones "
                            f"and a seeded sample)")
        self._evaluate: Callable = R.evaluate_retrieval

    def __call__(self, encoder) -> Selection:
        t0 = time.perf_counter()
        metrics = self._evaluate(encoder, self.data, batch_size=self.batch_size)
        extras = {k: float(v) for k, v in metrics.items() if k != self.metric and isinstance(v, (int, float))}
        extras["select_seconds"] = time.perf_counter() - t0
        return Selection(float(metrics[self.metric]), extras)


# ------------------------------------------------------------------------------------------------ factory
def build_selector(select_on: str, *, data_dir: str | None, select_data: str | None, select_split: str,
                   batch_size: int, analysis: bool = False, select_docs: int | None = None,
                   seed: int = 0) -> tuple[Selector | None, str | None]:
    """The selector a training config asks for, and a note to print when there is none (or None).

    Raises ``DataError`` when the user named data that is not there: an explicit ``data_dir`` without STS-B dev,
    a missing ``select_data``. With ``stsb_dev`` and no ``data_dir``, the default search (``$MIXCSE_DATA``,
    ``./data``, ``../shared/data/downstream``) may find nothing: then there is no selection, and the note says so.
    """
    if select_on not in SELECT_ON:
        raise D.DataError(f"select_on must be one of {', '.join(SELECT_ON)}, got {select_on!r}")
    if select_on == "none":
        return None, None
    if select_on == "stsb_dev":
        found = find_stsb_dev(data_dir)
        if found is None and data_dir is not None:
            raise D.DataError(f"data_dir {data_dir}: no STS-B dev file (STS/STSBenchmark/sts-dev.csv) under it; "
                              f"fix the path, or set select_on: none to train without checkpoint selection")
        if found is None:
            return None, ("no STS-B dev data found ($MIXCSE_DATA, ./data, ../shared/data/downstream): no checkpoint "
                          "selection, best/ will be the LAST step; set data_dir or run `mixcse data download`")
        return StsbDevSelector(found, batch_size, analysis), None
    if not select_data:
        raise D.DataError(f"select_on: {select_on} needs select_data ("
                          + ("a BEIR folder: corpus.jsonl, queries.jsonl, qrels/" if select_on == "retrieval"
                             else "a .tsv/.csv file of sentence1, sentence2, label") + ")")
    if not Path(select_data).exists():
        raise D.DataError(f"select_data not found: {select_data}")
    if select_on == "pairs":
        return PairsSelector(select_data, batch_size), None
    return RetrievalSelector(select_data, select_split, batch_size=batch_size, n_distractors=select_docs,
                             seed=seed), None
