"""Unsupervised STS: cosine of the two embeddings against the gold score, no regressor (``STSEvaluator``).

The headline number for STS12-16 is Spearman over all subsets pooled ("all"), which is what SimCSE and MixCSE
report. Older baselines averaged per-subset correlations weighted by subset size ("wmean"); the two are not
comparable, so both are stored under their own names.
"""
from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
from scipy import stats

from mixcse.evaluation import senteval as D
from mixcse.evaluation.evaluator import Evaluator, label, task_keys, task_row
from mixcse.evaluation.senteval import PairSet


def row_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine; a zero vector gives 0, not NaN (SentEval's nan_to_num)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    a = np.nan_to_num(a)
    b = np.nan_to_num(b)
    num = np.einsum("ij,ij->i", a, b)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nan_to_num(num / den)


def _corr(fn, x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 2:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant input: the result is NaN, reported as such
        value = fn(x, y)[0]
    return float(value) * 100.0


def spearman(x, y) -> float:
    """Spearman x 100 (ties get average ranks)."""
    return _corr(stats.spearmanr, np.asarray(x), np.asarray(y))


def pearson(x, y) -> float:
    return _corr(stats.pearsonr, np.asarray(x), np.asarray(y))


def score_pairs(emb_a: np.ndarray, emb_b: np.ndarray, gold: np.ndarray) -> dict:
    sys = row_cosine(emb_a, emb_b)
    return {"spearman": spearman(sys, gold), "pearson": pearson(sys, gold), "n": int(len(gold))}


def _weighted(values: list[float], weights: list[int]) -> float:
    vals = np.asarray(values, dtype=np.float64)
    if not len(vals) or not np.all(np.isfinite(vals)):
        return float("nan")
    return float(np.average(vals, weights=np.asarray(weights, dtype=np.float64)))


def score_sts_task(subsets: dict[str, PairSet], embed) -> dict:
    """Score one STS12-16 task. `embed(list[str]) -> matrix` looks up precomputed embeddings.

    Returns {"spearman": all, "pearson": all, "all": {...}, "wmean": {...}, "mean": {...}, "subsets": {...}}."""
    per, sys_all, gold_all = {}, [], []
    for name, ps in subsets.items():
        sys = row_cosine(embed(ps.a), embed(ps.b))
        per[name] = {"spearman": spearman(sys, ps.scores), "pearson": pearson(sys, ps.scores), "n": len(ps)}
        sys_all.append(sys)
        gold_all.append(ps.scores)
    sys_cat = np.concatenate(sys_all) if sys_all else np.zeros(0)
    gold_cat = np.concatenate(gold_all) if gold_all else np.zeros(0)
    n = [v["n"] for v in per.values()]
    all_ = {"spearman": spearman(sys_cat, gold_cat), "pearson": pearson(sys_cat, gold_cat)}
    return {
        "spearman": all_["spearman"],  # headline: pooled over all subsets ("all")
        "pearson": all_["pearson"],
        "n": int(sum(n)),
        "all": all_,
        "wmean": {"spearman": _weighted([v["spearman"] for v in per.values()], n),
                  "pearson": _weighted([v["pearson"] for v in per.values()], n)},
        "mean": {"spearman": _weighted([v["spearman"] for v in per.values()], [1] * len(n)),
                 "pearson": _weighted([v["pearson"] for v in per.values()], [1] * len(n))},
        "subsets": per,
    }


def finite_mean(values) -> float:
    vals = [float(v) for v in values]
    return float(np.mean(vals)) if vals and all(math.isfinite(v) for v in vals) else float("nan")


class STSEvaluator(Evaluator):
    """Spearman x100 of cosine similarities against graded gold scores: one of SentEval's STS12-16 (its subsets, the
    pooled "all" headline), STS-B or SICK-R test, or STS-B dev (``STSEvaluator.stsb_dev``, SimCSE's and MixCSE's
    checkpoint selection; with ``analysis=True`` the alignment / uniformity / angle figures of the same embeddings
    ride along). Results: ``spearman`` (primary), ``pearson``, ``n`` (+ per-subset figures for STS12-16)."""

    section = "sts"
    per_task = True
    primary_metric = "spearman"

    def __init__(self, name: str, data: PairSet | dict[str, PairSet], description: str, *, analysis: bool = False,
                 label: str | None = None, start_won_hint: str = ""):
        self.name, self.data, self.description, self.analysis = name, data, description, analysis
        self.extra_metrics = ("alignment", "uniformity", "max_angle", "mean_angle") if analysis else ()
        self._label, self.start_won_hint = label, start_won_hint

    @property
    def label(self) -> str:
        return self._label or label(self.name)

    @classmethod
    def protocol(cls, evaluators, context) -> dict:
        return {"similarity": "cosine", "regressor": None,
                "headline": "spearman = Spearman over all subsets pooled ('all'); 'wmean' = per-subset Spearman "
                            "averaged weighted by subset size; 'mean' = unweighted",
                "stsb_split": "test", "sick_split": "test_annotated", "blank_gold_lines": "skipped"}

    @classmethod
    def summarize(cls, section: dict) -> None:
        section["avg"] = finite_mean(section[t]["spearman"] for t in task_keys(section))

    @classmethod
    def table(cls, section: dict, settings: dict, label: str | None = None) -> list[str]:
        return ["STS: Spearman x100 of cosine similarity ('all' aggregation for STS12-16)",
                *task_row(section, "spearman", label)]

    @classmethod
    def card(cls, section: dict, settings: dict) -> list[str]:
        return ["STS: Spearman correlation x100 of cosine similarities (SentEval protocol, 'all' aggregation for "
                "STS12-16).", "", *task_row(section, "spearman", centred=True)]

    @classmethod
    def senteval(cls, task: str, data_dir) -> "STSEvaluator":
        """One of the 7 STS tasks of the SentEval protocol, read from the SentEval folder ``data_dir``."""
        if task in D.STS_SUBSETS:
            return cls(task, D.load_sts(data_dir, task), f"{task} 'all' Spearman x100 ({len(D.STS_SUBSETS[task])} "
                                                         f"subsets)")
        data = D.load_stsb(data_dir, "test") if task == "STSBenchmark" else D.load_sick(data_dir, "test_annotated")
        return cls(task, data, f"{task} test Spearman x100 ({len(data)} pairs)")

    @classmethod
    def stsb_dev(cls, data_dir, *, analysis: bool = False) -> "STSEvaluator":
        return cls("stsb_dev", D.load_stsb(data_dir, "dev"),
                   f"STS-B dev Spearman x100 ({Path(data_dir) / 'STS/STSBenchmark/sts-dev.csv'})", analysis=analysis,
                   label="STS-B dev", start_won_hint=(
                       "STS-B dev measures general-domain similarity; on a weak masked LM such as the CPU stand-in "
                       "SimCSE/MixCSE do not raise it (they do on all-MiniLM-L6-v2, docs/results.md); to adapt a "
                       "real encoder to your own domain see docs/domain-adaptation.md (recipes/domain/)"))

    def units(self) -> dict[str, list[str]]:
        sets = self.data.values() if isinstance(self.data, dict) else [self.data]
        return {self.name: [s for ps in sets for s in ps.sentences()]}

    def score(self, embeddings, encoder=None, **_) -> dict:
        embed = embeddings[self.name]
        if isinstance(self.data, dict):
            return score_sts_task(self.data, embed)
        out = score_pairs(embed(self.data.a), embed(self.data.b), self.data.scores)
        if self.analysis:
            from mixcse.evaluation.analysis import analyse

            stats = analyse({"dev": self.data}, embed)
            out.update({k: stats[k] for k in self.extra_metrics})
        return out
