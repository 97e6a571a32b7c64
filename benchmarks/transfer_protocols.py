"""Why SentEval's PyTorch probe and the converged scikit-learn probe give different transfer numbers.

    python benchmarks/transfer_protocols.py MODEL [--pooler P] [--tasks TREC,MRPC] [--cache-dir .cache/emb]
        [--output benchmarks/results/transfer_protocols/factors_NAME.json]

For each task, on the embeddings `mixcse eval` uses (the same per-task encoding and cache), runs the task's
SentEval protocol (same folds, same selection rule) with probes that differ in one respect at a time:
  * senteval-pytorch: the library's default (SentEval's PyTorch probe: Adam, early stopping, L2 as weight decay);
  * exact-refit: the L2 that senteval-pytorch picked, but the final model is the exact optimum of the same
    objective (mean cross-entropy + wd/2 |W, b|^2, i.e. LogisticRegression with C = 1 / (wd n) and a
    penalised intercept) instead of Adam with early stopping on a 5% split: isolates the optimiser;
  * exact-wd-grid: the exact optimum at every point of the weight-decay grid, picked by the same CV: isolates the
    grid (SentEval's C grid vs its L2 grid);
  * sklearn-converged: the library's other probe (C grid, each fit solved to convergence);
  * stock-senteval-sklearn: SentEval's `usepytorch=False` path with today's scikit-learn: a cold
    LogisticRegression(C, random_state=1111) with its defaults (lbfgs, multinomial, max_iter=100);
  * liblinear-ovr: the same with scikit-learn < 0.22's default, liblinear one-vs-rest (SentEval's era).
Writes one JSON record per task (accuracy, dev accuracy, chosen regulariser, CPU seconds per probe).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mixcse.evaluation import runner as R  # noqa: E402
from mixcse.evaluation import senteval as D  # noqa: E402
from mixcse.evaluation import transfer as T  # noqa: E402
from mixcse.evaluation.classifiers import SklearnLR, make_classifier  # noqa: E402
from mixcse.evaluation.encoding import encode_units, resolve_encoder  # noqa: E402


class ColdSklearn:
    """Any scikit-learn classifier, fitted cold for every probe (the `scan`/`fit_predict` interface of
    mixcse.evaluation.classifiers). `make(reg, n_train)` builds the estimator for one fit."""

    def __init__(self, make, grid, name):
        self.make, self.grid_inner, self.grid_kfold, self.name = make, grid, grid, name

    def reset(self):
        pass

    def _fit(self, X, y, reg):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self.make(reg, len(y)).fit(X, y)

    def scan(self, X, y, problems, regs, tests=None):
        acc = np.zeros((len(problems), len(regs)))
        preds = [[None] * len(regs) for _ in problems] if tests is not None else None
        for p, (tr, va) in enumerate(problems):
            for r, reg in enumerate(regs):
                model = self._fit(X[tr], y[tr], reg)
                acc[p, r] = np.mean(model.predict(X[va]) == y[va])
                if preds is not None:
                    preds[p][r] = model.predict(tests[p])
        return acc, preds

    def fit_predict(self, X, y, problems, regs, tests):
        return [self._fit(X[tr], y[tr], reg).predict(T_) for (tr, _), reg, T_ in zip(problems, regs, tests)]


def stock_lbfgs(C, n):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=C, random_state=1111)


def liblinear_ovr(C, n):
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    return OneVsRestClassifier(LogisticRegression(C=C, solver="liblinear", random_state=1111))


def exact_weight_decay(wd, n):
    """The optimum of mean cross-entropy + wd/2 |W|^2 (torch's weight decay also shrinks the bias; here the
    intercept is free, a small difference)."""
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=1.0 / (wd * n), solver="newton-cholesky", tol=1e-8, max_iter=1000)


class ExactRefit:
    """senteval-pytorch's scan (and so its choice of L2), then the exact optimum at that L2 for the final model."""

    def __init__(self, mode):
        self.torch = make_classifier("senteval-pytorch", mode)
        self.grid_inner = self.grid_kfold = self.torch.grid_inner
        self.exact = ColdSklearn(exact_weight_decay, self.grid_inner, "exact")

    def reset(self):
        pass

    def scan(self, X, y, problems, regs, tests=None):
        acc, _ = self.torch.scan(X, y, problems, regs)
        if tests is None:
            return acc, None
        best = [int(np.argmax(np.round(100 * a, 2))) for a in acc]
        preds = [[None] * len(regs) for _ in problems]
        for p, ((tr, _), r) in enumerate(zip(problems, best)):
            preds[p][r] = self.exact.fit_predict(X, y, [(tr, None)], [regs[r]], [tests[p]])[0]
        return acc, preds

    def fit_predict(self, X, y, problems, regs, tests):
        return self.exact.fit_predict(X, y, problems, regs, tests)


def probes(mode: str) -> dict:
    wd_grid = make_classifier("senteval-pytorch", mode).grid_inner
    c_grid = SklearnLR(fast=mode == "fasttest")
    return {
        "senteval-pytorch": lambda: make_classifier("senteval-pytorch", mode),
        "exact-refit": lambda: ExactRefit(mode),
        "exact-wd-grid": lambda: ColdSklearn(exact_weight_decay, wd_grid, "exact-wd-grid"),
        "sklearn-converged": lambda: make_classifier("sklearn-converged", mode),
        "stock-senteval-sklearn": lambda: _with_grids(ColdSklearn(stock_lbfgs, None, "stock"), c_grid),
        "liblinear-ovr": lambda: _with_grids(ColdSklearn(liblinear_ovr, None, "ovr"), c_grid),
    }


def _with_grids(probe, like):
    probe.grid_inner, probe.grid_kfold = like.grid_inner, like.grid_kfold
    return probe


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--pooler", default=None)
    ap.add_argument("--tasks", default="TREC")
    ap.add_argument("--probes", default=None, help="comma-separated subset of the probes (default: all)")
    ap.add_argument("--cache-dir", default=".cache/emb")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--mode", default="test", choices=("test", "fasttest"))
    ap.add_argument("--output", required=True)
    args = ap.parse_args(argv)
    tasks = [t for t in R.expand_tasks(args.tasks) if t in D.TRANSFER_TASKS]
    ddir = D.resolve_data_dir(args.data_dir)
    encoder = resolve_encoder(args.model, pooler=args.pooler)
    loaded = {t: T.load_task(ddir, t) for t in tasks}
    units, stats = encode_units(encoder, {t: T.task_sentences(t, loaded[t]) for t in tasks},
                                cache_dir=args.cache_dir)
    print(f"embeddings: {stats}", flush=True)
    available = probes(args.mode)
    names = args.probes.split(",") if args.probes else list(available)
    out = {"model": args.model, "pooler": args.pooler, "mode": args.mode, "tasks": {}}
    for task in tasks:
        index, emb = units[task]
        embed = R._Embeddings(index, emb)
        for name in names:
            c0 = time.process_time()
            res = T.run_task(task, loaded[task], embed, available[name](), R.KFOLD[args.mode])
            res["cpu_seconds"] = round(time.process_time() - c0, 1)
            out["tasks"].setdefault(task, {})[name] = res
            print(f"{task} {name}: acc {res['acc']} dev {res['devacc']} reg {res['chosen_reg']} "
                  f"({res['cpu_seconds']} s)", flush=True)
            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
            Path(args.output).write_text(json.dumps(R.to_jsonable(out), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
