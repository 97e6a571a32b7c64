"""Pair classification and pair similarity on the user's own labelled pairs (``PairsEvaluator``).

Interface:
    read_pairs(path) -> PairSet          a .tsv/.csv of sentence1, sentence2, label (or score)
    score_pairs(emb_a, emb_b, labels)    -> metrics dict (x100) of the cosine similarities
    PairsEvaluator(paths)(encoder)       -> {name: metrics} for one or more files, each sentence embedded once
    PairsEvaluator(paths, threshold_from=dev) also scores F1 at the threshold that maximises F1 on ``dev``

Binary labels (0/1: duplicate or not, paraphrase or not) are scored as MTEB's PairClassification scores them:
``ap`` = average precision of the cosine similarities (scikit-learn's ``average_precision_score``; the primary
metric), ``accuracy`` and ``f1`` at their best thresholds (with those thresholds). Graded labels (any other
numbers, e.g. 0-5 similarity) are scored by ``spearman`` (primary) and ``pearson`` of the cosines. ``main`` names the
primary metric of each file.

``f1`` is the F1 of each file at that file's own best threshold: an upper bound, since the threshold is picked on
the pairs it scores. A threshold chosen on other labelled pairs (``threshold_from``, a dev file) gives the F1 a user
gets who must fix the threshold before seeing the test pairs: ``f1_dev_threshold`` (with ``precision_dev_threshold``,
``recall_dev_threshold`` and ``dev_threshold``), the matching literature's figure.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from mixcse.evaluation import senteval as D
from mixcse.evaluation import sts as S
from mixcse.evaluation.evaluator import Evaluator

LABEL_COLUMNS = ("label", "score")


def read_pairs(path: str | Path) -> D.PairSet:
    """A labelled pair file: .tsv or .csv with a header naming sentence1, sentence2 and label (or score), in any
    order, or exactly three columns in that order without a header."""
    path = Path(path)
    if not path.is_file():
        raise D.DataError(f"{path}: pair file not found")
    delimiter = "," if path.suffix.lower() == ".csv" else "\t"
    lines = [(n, text) for n, text in enumerate(D._lines_universal(path), 1) if text.strip()]
    if not lines:
        raise D.DataError(f"{path}: no pairs")
    quoting = csv.QUOTE_MINIMAL if delimiter == "," else csv.QUOTE_NONE  # a tab file: quotes are text
    rows = [(n, row) for (n, _), row in zip(lines, csv.reader([t for _, t in lines], delimiter=delimiter,
                                                               quoting=quoting))]
    header = [c.strip().lower() for c in rows[0][1]]
    columns = (0, 1, 2)
    label = next((c for c in LABEL_COLUMNS if c in header), None)
    if {"sentence1", "sentence2"} <= set(header) and label is not None:
        columns = (header.index("sentence1"), header.index("sentence2"), header.index(label))
        rows = rows[1:]
    elif {"sentence1", "sentence2"} & set(header):
        raise D.DataError(f"{path}: the header names sentence1/sentence2 but no label or score column")
    a, b, scores = [], [], []
    for lineno, row in rows:
        if len(row) <= max(columns):
            raise D.DataError(f"{path}:{lineno}: expected sentence1, sentence2, label; found {len(row)} field(s)")
        a.append(row[columns[0]].strip())
        b.append(row[columns[1]].strip())
        scores.append(D._score(row[columns[2]], path, lineno))
    if len(a) < 2:
        raise D.DataError(f"{path}: needs at least two labelled pairs, found {len(a)}")
    if len(set(scores)) == 1:
        raise D.DataError(f"{path}: every pair has the label {scores[0]:g}, only one label value: pair scores need "
                          f"both classes (0 and 1: average precision) or graded scores that vary (Spearman)")
    return D.PairSet(a, b, np.asarray(scores, dtype=np.float64), str(path))


def is_binary(labels: np.ndarray) -> bool:
    """0/1 labels with both classes present: a pair-classification file."""
    values = set(np.unique(labels).tolist())
    return values == {0.0, 1.0}


def best_threshold_scores(similarity: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Accuracy and F1 x100 at the best threshold on ``similarity`` (predict 1 when similarity >= threshold)."""
    from sklearn.metrics import precision_recall_curve, roc_curve

    y = labels.astype(np.int64)
    positives, negatives = int(y.sum()), int(len(y) - y.sum())
    fpr, tpr, thresholds = roc_curve(y, similarity, drop_intermediate=False)
    accuracy = (tpr * positives + (1.0 - fpr) * negatives) / len(y)
    i = int(np.argmax(accuracy))
    precision, recall, pr_thresholds = precision_recall_curve(y, similarity)
    with np.errstate(divide="ignore", invalid="ignore"):
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)[:-1]
    j = int(np.argmax(f1))
    return {"accuracy": 100.0 * float(accuracy[i]), "accuracy_threshold": float(min(thresholds[i], 1.0)),
            "f1": 100.0 * float(f1[j]), "f1_threshold": float(pr_thresholds[j]),
            "precision": 100.0 * float(precision[j]), "recall": 100.0 * float(recall[j])}


def f1_at(similarity: np.ndarray, labels: np.ndarray, threshold: float) -> dict[str, float]:
    """F1, precision and recall x100 when pairs at ``similarity >= threshold`` are predicted 1."""
    predicted, y = similarity >= threshold, labels.astype(bool)
    hits = int((predicted & y).sum())
    precision = hits / predicted.sum() if predicted.any() else 0.0
    recall = hits / y.sum() if y.any() else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {"f1_dev_threshold": 100.0 * float(f1), "precision_dev_threshold": 100.0 * float(precision),
            "recall_dev_threshold": 100.0 * float(recall), "dev_threshold": float(threshold)}


def score_pairs(emb_a: np.ndarray, emb_b: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
    """The metrics of one pair file from its embeddings (rows of ``emb_a`` and ``emb_b`` pair up)."""
    similarity = S.row_cosine(emb_a, emb_b)
    labels = np.asarray(labels, dtype=np.float64)
    out: dict[str, Any] = {"n_pairs": int(len(labels))}
    if is_binary(labels):
        from sklearn.metrics import average_precision_score

        out.update(main="ap", ap=100.0 * float(average_precision_score(labels.astype(np.int64), similarity)),
                   positives=int(labels.sum()), **best_threshold_scores(similarity, labels))
    else:
        from scipy.stats import pearsonr

        out.update(main="spearman", spearman=S.spearman(similarity, labels),
                   pearson=100.0 * float(pearsonr(similarity, labels)[0]))
    return out


def pair_file_names(paths: Iterable[str | Path]) -> list[str]:
    """Short, distinct names for result keys: the file stem, with parent folders added until names differ."""
    paths = [Path(p) for p in paths]
    depth = 1
    while True:
        names = ["/".join(p.with_suffix("").parts[-depth:]) for p in paths]
        if len(set(names)) == len(names) or depth > max(len(p.parts) for p in paths):
            return names
        depth += 1


def format_pairs_table(results: dict[str, dict]) -> list[str]:
    """Markdown lines: one row per file with its primary metric first; "F1 dev thr." when a dev file set the
    threshold (``threshold_from``)."""
    from mixcse.utils.tables import markdown_table, number

    dev = any("f1_dev_threshold" in r for r in results.values())
    rows = []
    for name, r in results.items():
        extra = [number(r.get("f1_dev_threshold"))] if dev else []
        if r["main"] == "ap":
            rows.append([name, str(r["n_pairs"]), number(r["ap"]), number(r["accuracy"]), number(r["f1"]), *extra,
                         ""])
        else:
            rows.append([name, str(r["n_pairs"]), "", "", "", *([""] if dev else []), number(r["spearman"])])
    return markdown_table(["Pairs", "n", "AP", "Acc.", "F1", *(["F1 dev thr."] if dev else []), "Spearman"], rows)


class PairsEvaluator(Evaluator):
    """Labelled pair files scored by the cosines of their two sentences: cosine average precision x100 (MTEB
    PairClassification's main metric) for 0/1 labels, with accuracy and F1 at their best thresholds; Spearman x100
    for graded labels. Every distinct sentence of all the files is embedded once (one unit).

    Results: ``{file name: metrics}`` (``pair_file_names``). With one file the evaluator can select checkpoints:
    its name is ``pairs_ap`` or ``pairs_spearman`` and its primary metric that file's main one."""

    section = "pairs"
    extra_metrics = ("accuracy", "f1")

    @property
    def label(self) -> str:
        """"dev pairs AP" for a file dev.tsv of 0/1 labels."""
        metric = "AP" if self.primary_metric == "ap" else "Spearman"
        return f"{Path(self.sets[0].source).stem} pairs {metric}" if len(self.sets) == 1 else "pairs"

    @classmethod
    def protocol(cls, evaluators, context) -> dict:
        out = {"files": [str(f) for f in context["pairs_data"]], "similarity": "cosine",
               "binary_labels": "ap (main; sklearn average_precision_score), accuracy and f1 at best thresholds",
               "graded_labels": "spearman (main), pearson"}
        if context.get("threshold_from"):
            out["f1_dev_threshold"] = f"f1 at the threshold that maximises f1 on {context['threshold_from']}"
        return out

    @classmethod
    def table(cls, section: dict, settings: dict, label: str | None = None) -> list[str]:
        dev = next((r["threshold_from"] for r in section.values() if r.get("threshold_from")), None)
        return ["Pairs x100 (cosine): AP, accuracy and F1 at each file's own best thresholds for 0/1 labels"
                + (f", F1 at the threshold best on {Path(dev).name}" if dev else "") + "; Spearman for graded labels",
                *format_pairs_table(section)]

    @classmethod
    def card(cls, section: dict, settings: dict) -> list[str]:
        dev = next((r["threshold_from"] for r in section.values() if r.get("threshold_from")), None)
        return ["Labelled pairs: x100 of cosine similarities; AP (average precision), accuracy and F1 at each file's "
                "own best thresholds for 0/1 labels" + (f", F1 at the threshold best on {Path(dev).name}" if dev
                                                        else "") + ", Spearman for graded labels.", "",
                *format_pairs_table(section)]

    def __init__(self, paths: str | Path | Iterable[str | Path], *, name: str | None = None,
                 threshold_from: str | Path | None = None):
        paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
        if not paths:
            raise D.DataError("no pair files given")
        self.sets = [read_pairs(p) for p in paths]
        self.dev = None if threshold_from is None else read_pairs(threshold_from)
        if self.dev is not None and not is_binary(self.dev.scores):
            raise D.DataError(f"{threshold_from}: a threshold needs 0/1 labels; this file has graded scores")
        self.files = pair_file_names([ps.source for ps in self.sets])
        binary = is_binary(self.sets[0].scores)
        self.primary_metric = "ap" if binary else "spearman"
        self.name = name or (f"pairs_{self.primary_metric}" if len(paths) == 1 else "pairs")
        what = "cosine average precision" if binary else "Spearman of cosine similarities"
        self.description = (f"{what} x100 on {len(self.sets[0])} labelled pairs ({paths[0]})" if len(paths) == 1 else
                            f"pair AP / Spearman x100 on {len(paths)} files")

    def units(self) -> dict[str, list[str]]:
        units = {self.name: [s for ps in self.sets for s in ps.a + ps.b]}
        if self.dev is not None:  # its own unit: the scored files' embeddings stay those of a run without it
            units[f"{self.name}:threshold_from"] = self.dev.a + self.dev.b
        return units

    def score(self, embeddings, encoder=None, **_) -> dict[str, dict]:
        embed = embeddings[self.name]
        out = {name: {"file": ps.source, **score_pairs(embed(ps.a), embed(ps.b), ps.scores)}
               for name, ps in zip(self.files, self.sets)}
        if self.dev is not None:
            dev_embed = embeddings[f"{self.name}:threshold_from"]
            dev = S.row_cosine(dev_embed(self.dev.a), dev_embed(self.dev.b))
            threshold = best_threshold_scores(dev, self.dev.scores)["f1_threshold"]
            for r, ps in zip(out.values(), self.sets):
                if r["main"] == "ap":
                    r.update(f1_at(S.row_cosine(embed(ps.a), embed(ps.b)), ps.scores, threshold),
                             threshold_from=self.dev.source)
        return out

    def _only(self, results: dict) -> dict:
        if len(results) != 1:
            raise ValueError("a primary metric needs a PairsEvaluator of one file")
        return next(iter(results.values()))

    def primary(self, results: dict) -> float:
        one = self._only(results)
        return float(one[one["main"]])

    def extras(self, results: dict) -> dict[str, float]:
        return super().extras(self._only(results))
