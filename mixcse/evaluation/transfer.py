"""SentEval transfer tasks: frozen embeddings, logistic-regression probe, test accuracy (``TransferEvaluator``).

MR/CR/SUBJ/MPQA: k-fold CV (L2 picked by inner k-fold CV); SST-2: L2 picked on dev; TREC and MRPC: L2 picked by
k-fold CV on train, refit on train, scored on test. MRPC's features are [|u-v|, u*v]. Always the *test* number
(MixCSE's released code printed the dev accuracy for these; that is not comparable).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.metrics import f1_score

from mixcse.evaluation import senteval as D
from mixcse.evaluation.evaluator import Evaluator, task_keys, task_row
from mixcse.evaluation.probes import SEED, dev_split, inner_kfold, kfold_then_test, single_threaded

INNER_CV_TASKS = ("MR", "CR", "SUBJ", "MPQA")


def load_task(data_dir: Path, task: str):
    if task in ("MR", "CR", "SUBJ", "MPQA"):
        return D.load_binary(data_dir, task)
    if task == "SST2":
        return D.load_sst2(data_dir)
    if task == "TREC":
        return D.load_trec(data_dir)
    if task == "MRPC":
        return D.load_mrpc(data_dir)
    raise KeyError(task)


def task_sentences(task: str, loaded) -> list[str]:
    if task in ("MR", "CR", "SUBJ", "MPQA"):
        return loaded.sentences
    if task == "MRPC":
        return [s for split in loaded.values() for s in split.sentences()]
    return [s for split in loaded.values() for s in split.sentences]


def run_task(task: str, loaded, embed, clf, kfold: int, seed: int = SEED) -> dict:
    """`embed(list[str]) -> float32 matrix` returns precomputed embeddings."""
    with single_threaded():
        if task in ("MR", "CR", "SUBJ", "MPQA"):
            return inner_kfold(embed(loaded.sentences), loaded.labels, clf, kfold, seed)
        if task == "SST2":
            tr, dv, te = loaded["train"], loaded["dev"], loaded["test"]
            return dev_split(embed(tr.sentences), tr.labels, embed(dv.sentences), dv.labels,
                             embed(te.sentences), te.labels, clf)
        if task == "TREC":
            tr, te = loaded["train"], loaded["test"]
            out, _ = kfold_then_test(embed(tr.sentences), tr.labels, embed(te.sentences), te.labels, clf, kfold,
                                     seed)
            return out
        if task == "MRPC":
            feats = {}
            for split, ps in loaded.items():
                a, b = embed(ps.a), embed(ps.b)
                feats[split] = np.c_[np.abs(a - b), a * b]
            ytr, yte = loaded["train"].scores, loaded["test"].scores
            out, yhat = kfold_then_test(feats["train"], ytr, feats["test"], yte, clf, kfold, seed)
            out["f1"] = round(100 * float(f1_score(yte, yhat)), 2)
            return out
    raise KeyError(task)


class TransferEvaluator(Evaluator):
    """One SentEval transfer task: a logistic-regression probe on the frozen embeddings, its test accuracy x100
    (``acc``, primary; MRPC adds ``f1``). ``classifier``: a probe from ``probes.make_classifier``; ``kfold``: 10
    (the published protocol) or 5 (fasttest). Picklable, so that ``evaluate(workers=N)`` can score it in a worker
    process."""

    section = "transfer"
    per_task = True
    primary_metric = "acc"

    @classmethod
    def protocol(cls, evaluators, context) -> dict:
        kfold = context["kfold"]
        return {"reported": "test accuracy", "mrpc_features": "[|u-v|, u*v]",
                "protocols": {"MR/CR/SUBJ/MPQA": f"{kfold}-fold stratified CV, L2 picked by inner {kfold}-fold CV on "
                                                 f"each training split",
                              "SST2": "L2 picked on dev, test accuracy",
                              "TREC/MRPC": f"L2 picked by {kfold}-fold CV on train, refit on train"}}

    @classmethod
    def summarize(cls, section: dict) -> None:
        from mixcse.evaluation.sts import finite_mean

        section["avg"] = finite_mean(section[t]["acc"] for t in task_keys(section))

    @classmethod
    def table(cls, section: dict, settings: dict, label: str | None = None) -> list[str]:
        from mixcse.utils.tables import number

        clf = settings.get("classifier", {}).get("classifier", "?")
        lines = [f"Transfer: test accuracy x100 (logistic regression, classifier={clf}, "
                 f"mode={settings.get('mode', '?')})", *task_row(section, "acc", label)]
        if "MRPC" in section:
            lines.append(f"(MRPC F1: {number(section['MRPC'].get('f1'))})")
        return lines

    @classmethod
    def card(cls, section: dict, settings: dict) -> list[str]:
        mode, probe = settings.get("mode"), settings.get("classifier")
        probe = probe.get("classifier") if isinstance(probe, dict) else None
        details = ", ".join(x for x in (f"mode {mode}" if mode else "", f"probe {probe}" if probe else "") if x)
        return ["Transfer: test accuracy x100 of a logistic regression on the frozen embeddings"
                + (f" (SentEval, {details})." if details else " (SentEval)."), "",
                *task_row(section, "acc", centred=True)]

    def __init__(self, task: str, data_dir, classifier, kfold: int):
        self.name, self.classifier, self.kfold = task, classifier, kfold
        self.data = load_task(data_dir, task)
        self.description = f"{task} test accuracy x100 ({classifier.name} probe, {kfold} folds)"

    def units(self) -> dict[str, list[str]]:
        return {self.name: task_sentences(self.name, self.data)}

    def worker_cost(self, embeddings: dict) -> tuple:
        """The inner-CV tasks (10 x 10 folds x the C grid) first, the larger first: they take most of the time."""
        return self.name not in INNER_CV_TASKS, -len(embeddings[self.name].matrix)

    def score(self, embeddings, encoder=None, **_) -> dict:
        return run_task(self.name, self.data, embeddings[self.name], self.classifier, self.kfold, SEED)
