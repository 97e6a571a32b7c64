"""Checkpoint selection: which evaluator scores the model being trained on the user's own development data.

A training run calls the selector at every evaluation, and at step 0: the starting model is always a candidate, so
a run never ships a model worse on the selection metric than the one it started from. A selector is an
``Evaluator`` (mixcse/evaluation/evaluator.py): its ``name`` is the metric's key in metrics.jsonl and summary.json,
its primary metric the score, its ``extras`` the further figures logged beside it. It is called on a
``mixcse.SentenceEncoder`` over the model in training (its test-time pooler and inference length), so a checkpoint
is judged as it will be used.

One registry, ``SELECTORS``, names what ``select_on`` and ``guard_data`` accept and builds their evaluators
(``register_selector`` adds one). A name is a task or, for one split of a task, ``<task>_<split>``: ``stsb_dev`` is
STS-B's dev split. A selector that needs no data of the user's and ``guard=True`` may also be a ``guard_data``
value; any other ``guard_data`` is a labelled pairs file.

Built-in selectors (``select_on`` in the training config):
  * ``stsb_dev``  STS-B dev Spearman x100 of cosine similarities (SimCSE's and MixCSE's selection); a guard too.
  * ``retrieval`` nDCG@10 x100 on a fixed, seeded sub-corpus of a BEIR dataset's non-test split
                  (``mixcse.evaluation.retrieval.dev_subset``): the split's relevant documents plus a sample of
                  the others, so that a selection pass costs seconds, not the minutes of the whole corpus.
  * ``pairs``     a labelled file of (sentence1, sentence2, label): cosine average precision x100 when the labels
                  are 0/1 (duplicate or not), else Spearman x100 of the cosines (``mixcse.evaluation.pairs``).
  * ``none``      no selection: ``best/`` is the last step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from mixcse.evaluation import senteval as D
from mixcse.evaluation.evaluator import Evaluator


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


@dataclass(frozen=True)
class Selector:
    """How a ``select_on`` / ``guard_data`` name builds its evaluator: ``build(data, options)`` (``data``: the
    user's ``select_data``, None when ``needs`` is None; ``options``: data_dir, select_split, analysis, select_docs,
    remedy). ``needs``: what ``select_data`` must be, or None. ``guard``: the name may be a ``guard_data`` value.
    ``missing(data_dir)``: when the data of a selector that needs none of the user's is nowhere to be found and no
    folder was named, the note that the run then selects nothing (None: it is there)."""
    build: Callable[[str | None, dict], Evaluator]
    needs: str | None = None
    guard: bool = False
    missing: Callable[[str | None], str | None] | None = None


def _stsb_dev(data, options: dict) -> Evaluator:
    return stsb_dev_evaluator(options["data_dir"], analysis=options.get("analysis", False),
                              **({"remedy": options["remedy"]} if options.get("remedy") else {}))


def _stsb_dev_missing(data_dir: str | None) -> str | None:
    if data_dir is None and find_stsb_dev(None) is None:
        return ("no STS-B dev data found ($MIXCSE_DATA, ./data, ~/.cache/mixcse/data): no checkpoint selection, "
                "best/ will be the LAST step; run `mixcse data download` or set data_dir")
    return None


def _retrieval(data, options: dict) -> Evaluator:
    from mixcse.evaluation.retrieval import RetrievalEvaluator

    return RetrievalEvaluator(data, options.get("select_split", "train"), subset=True,
                              n_distractors=options.get("select_docs"))


def _pairs(data, options: dict) -> Evaluator:
    from mixcse.evaluation.pairs import PairsEvaluator

    return PairsEvaluator([data])


SELECTORS: dict[str, Selector] = {
    "stsb_dev": Selector(_stsb_dev, guard=True, missing=_stsb_dev_missing),
    "retrieval": Selector(_retrieval, "a BEIR folder: corpus.jsonl, queries.jsonl, qrels/"),
    "pairs": Selector(_pairs, "a .tsv/.csv file of sentence1, sentence2, label"),
}


def register_selector(name: str, build: Callable[[str | None, dict], Evaluator], *, needs: str | None = None,
                      guard: bool = False, missing: Callable[[str | None], str | None] | None = None) -> None:
    """A new ``select_on`` value (and, with ``guard`` and no ``needs``, a ``guard_data`` name)."""
    if name == "none":
        raise ValueError("'none' is no selector's name")
    SELECTORS[name] = Selector(build, needs, guard, missing)


def select_on_values() -> tuple[str, ...]:
    return (*SELECTORS, "none")


def guard_names() -> tuple[str, ...]:
    """The ``guard_data`` values that name a registered selector rather than a file."""
    return tuple(name for name, s in SELECTORS.items() if s.guard and s.needs is None)


def build_selector(select_on: str, *, data_dir: str | None, select_data: str | None, select_split: str,
                   analysis: bool = False, select_docs: int | None = None) -> tuple[Evaluator | None, str | None]:
    """The evaluator a training config selects with, and a note to print when there is none (or None).

    Raises ``DataError`` when the user named data that is not there: an explicit ``data_dir`` without STS-B dev,
    a missing ``select_data``. With ``stsb_dev`` and no ``data_dir``, the default search may find nothing: then
    there is no selection, and the note says so.
    """
    if select_on not in select_on_values():
        raise D.DataError(f"select_on must be one of {', '.join(select_on_values())}, got {select_on!r}")
    if select_on == "none":
        return None, None
    selector = SELECTORS[select_on]
    note = selector.missing(data_dir) if selector.missing is not None else None
    if note is not None:
        return None, note
    if selector.needs is not None:
        if not select_data:
            raise D.DataError(f"select_on: {select_on} needs select_data ({selector.needs})")
        if not Path(select_data).exists():
            raise D.DataError(f"select_data not found: {select_data}")
    options = {"data_dir": data_dir, "select_split": select_split, "analysis": analysis, "select_docs": select_docs}
    return selector.build(select_data if selector.needs is not None else None, options), None


def build_guard(guard_data: str, *, data_dir: str | None) -> Evaluator:
    """The forgetting guard's evaluator: a registered guard name (``stsb_dev``: STS-B dev Spearman, from ``data_dir``
    or the default search) or a labelled file of (sentence1, sentence2, label or score) -- a general skill the
    adapted model must keep. Raises ``DataError`` (before any training) when the data is missing or malformed."""
    if guard_data in guard_names():
        return SELECTORS[guard_data].build(None, {
            "data_dir": data_dir, "remedy": "set guard_data to a labelled pairs file, or leave it unset"})
    if not Path(guard_data).is_file():
        raise D.DataError(f"guard_data not found: {guard_data} (a .tsv/.csv of sentence1, sentence2, label, or "
                          f"{' or '.join(guard_names())})")
    return _pairs(guard_data, {})
