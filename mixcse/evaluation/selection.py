"""Checkpoint selection: which evaluator scores the model being trained on the user's own development data.

A training run calls the selector at every evaluation, and at step 0: the starting model is always a candidate, so
a run never ships a model worse on the selection metric than the one it started from. A selector is an
``Evaluator`` (mixcse/evaluation/evaluator.py): its ``name`` is the metric's key in metrics.jsonl and summary.json,
its primary metric the score, its ``extras`` the further figures logged beside it. It is called on a
``mixcse.SentenceEncoder`` over the model in training (its test-time pooler and inference length), so a checkpoint
is judged as it will be used.

Built-in selectors (``select_on`` in the training config):
  * ``stsb_dev``  STS-B dev Spearman x100 of cosine similarities (SimCSE's and MixCSE's selection).
  * ``retrieval`` nDCG@10 x100 on a fixed, seeded sub-corpus of a BEIR dataset's non-test split
                  (``mixcse.evaluation.retrieval.dev_subset``): the split's relevant documents plus a sample of
                  the others, so that a selection pass costs seconds, not the minutes of the whole corpus.
  * ``pairs``     a labelled file of (sentence1, sentence2, label): cosine average precision x100 when the labels
                  are 0/1 (duplicate or not), else Spearman x100 of the cosines (``mixcse.evaluation.pairs``).
  * ``none``      no selection: ``best/`` is the last step.
"""
from __future__ import annotations

import math
from pathlib import Path

from mixcse.evaluation import senteval as D
from mixcse.evaluation.evaluator import Evaluator

SELECT_ON = ("stsb_dev", "retrieval", "pairs", "none")  # the built-in selectors (config key select_on)


def better(new: float | None, old: float | None, greater_is_better: bool = True) -> bool:
    """Whether score ``new`` beats ``old`` strictly; a missing or NaN score never wins against a real one."""
    def rank(x):
        if x is None or (isinstance(x, float) and math.isnan(x)):
            return -math.inf
        return x if greater_is_better else -x

    return rank(new) > rank(old)


def find_stsb_dev(data_dir: str | None) -> Path | None:
    """The SentEval folder holding STS-B dev, from ``data_dir`` or the default search; None when there is none."""
    try:
        ddir = D.resolve_data_dir(data_dir)
    except D.DataError:
        return None
    return ddir if (ddir / "STS" / "STSBenchmark" / "sts-dev.csv").is_file() else None


def stsb_dev_evaluator(data_dir: str | None, *, analysis: bool = False,
                       remedy: str = "set select_on: none to train without checkpoint selection") -> Evaluator:
    """STS-B dev from ``data_dir`` or the default search; ``DataError`` (saying ``remedy``) when there is none."""
    from mixcse.evaluation.sts import STSEvaluator

    found = find_stsb_dev(data_dir)
    if found is None:
        where = (f"data_dir {data_dir}: no STS-B dev file (STS/STSBenchmark/sts-dev.csv) under it; fix the path"
                 if data_dir is not None else "no STS-B dev file found ($MIXCSE_DATA, ./data, ~/.cache/mixcse/data); "
                                              "run `mixcse data download`, set data_dir")
        raise D.DataError(f"{where}, or {remedy}")
    return STSEvaluator.stsb_dev(found, analysis=analysis)


def build_selector(select_on: str, *, data_dir: str | None, select_data: str | None, select_split: str,
                   analysis: bool = False, select_docs: int | None = None) -> tuple[Evaluator | None, str | None]:
    """The evaluator a training config selects with, and a note to print when there is none (or None).

    Raises ``DataError`` when the user named data that is not there: an explicit ``data_dir`` without STS-B dev,
    a missing ``select_data``. With ``stsb_dev`` and no ``data_dir``, the default search may find nothing: then
    there is no selection, and the note says so.
    """
    if select_on not in SELECT_ON:
        raise D.DataError(f"select_on must be one of {', '.join(SELECT_ON)}, got {select_on!r}")
    if select_on == "none":
        return None, None
    if select_on == "stsb_dev":
        if data_dir is None and find_stsb_dev(None) is None:
            return None, ("no STS-B dev data found ($MIXCSE_DATA, ./data, ~/.cache/mixcse/data): no checkpoint "
                          "selection, best/ will be the LAST step; run `mixcse data download` or set data_dir")
        return stsb_dev_evaluator(data_dir, analysis=analysis), None
    if not select_data:
        raise D.DataError(f"select_on: {select_on} needs select_data ("
                          + ("a BEIR folder: corpus.jsonl, queries.jsonl, qrels/" if select_on == "retrieval"
                             else "a .tsv/.csv file of sentence1, sentence2, label") + ")")
    if not Path(select_data).exists():
        raise D.DataError(f"select_data not found: {select_data}")
    if select_on == "pairs":
        from mixcse.evaluation.pairs import PairsEvaluator

        return PairsEvaluator([select_data]), None
    from mixcse.evaluation.retrieval import RetrievalEvaluator

    return RetrievalEvaluator(select_data, select_split, subset=True, n_distractors=select_docs), None


def build_guard(guard_data: str, *, data_dir: str | None) -> Evaluator:
    """The forgetting guard's evaluator: ``stsb_dev`` (STS-B dev Spearman, from ``data_dir`` or the default search)
    or a labelled file of (sentence1, sentence2, label or score) -- a general skill the adapted model must keep.
    Raises ``DataError`` (before any training) when the data is missing or malformed."""
    if guard_data == "stsb_dev":
        evaluator = stsb_dev_evaluator(data_dir, remedy="set guard_data to a labelled pairs file, or leave it unset")
    else:
        if not Path(guard_data).is_file():
            raise D.DataError(f"guard_data not found: {guard_data} (a .tsv/.csv of sentence1, sentence2, label, or "
                              f"stsb_dev)")
        from mixcse.evaluation.pairs import PairsEvaluator

        evaluator = PairsEvaluator([guard_data])
    return evaluator
