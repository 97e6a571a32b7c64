"""Logistic-regression probes on frozen embeddings, run the way SentEval runs them.

Three protocols (SentEval's InnerKFoldClassifier, KFoldClassifier and SplitClassifier) and two classifier
back-ends, chosen by name with `make_classifier(name, mode)`:
  * "senteval-pytorch" (`TorchLR`, the default; aliases "torch", "senteval"): SentEval's `usepytorch=True` probe,
    the one SimCSE and MixCSE reported -- Adam, early stopping, L2 as weight decay;
  * "sklearn-converged" (`SklearnLR`; alias "sklearn"): scikit-learn LogisticRegression on SentEval's C grids,
    every fit solved to convergence (SentEval's `usepytorch=False` path, minus its iteration cap).
Fold splits, seeds, grids, the order of the data and the rounding of intermediate scores follow SentEval,
because each of them moves the reported accuracy. docs/evaluation-protocol.md says why the two back-ends differ.

Speed: a probe is refit hundreds of times per task (600 fits for one 10-fold inner-CV task). The torch probe
trains all folds x regularisation strengths of a protocol step as one batched model -- SentEval seeds every probe
identically, so they all see the same batch order anyway -- in `probe_torch` (tests/probe_reference.py holds the
plain loop it is tested against). The sklearn probe solves all folds of a two-class task together to the exact
optimum in `probe_newton` (tested against one scikit-learn fit at a time, which is also what multi-class TREC
runs: see `SklearnLR`). Both run on one thread: the problems are too small to share.
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
from sklearn.model_selection import StratifiedKFold

from mixcse.evaluation import probe_newton, probe_torch

SEED = 1111


def stratified_folds(y: np.ndarray, k: int, seed: int = SEED) -> list[tuple[np.ndarray, np.ndarray]]:
    """SentEval's folds: StratifiedKFold(k, shuffle=True, random_state=seed) over the data in its given order."""
    y = np.asarray(y)
    skf = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    return [(tr, te) for tr, te in skf.split(np.zeros((len(y), 1)), y)]


@contextmanager
def single_threaded():
    """One BLAS/torch thread for the probes: the matrices are small, and on a 2-core VM a second thread made
    each lbfgs iteration / Adam step ~10x slower (thread hand-off dominates the tiny matvecs)."""
    import sys

    from threadpoolctl import threadpool_limits

    torch = sys.modules.get("torch")  # only if already imported: the sklearn path must not pay for importing it
    before = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(1)
    try:
        with threadpool_limits(1):
            yield
    finally:
        if torch is not None:
            torch.set_num_threads(before)


def _acc(pred: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.asarray(pred) == np.asarray(y))) if len(y) else float("nan")


# --------------------------------------------------------------------------------------------------- back-ends
@dataclass
class SklearnLR:
    """scikit-learn LogisticRegression (L2 on the weights, unpenalised intercept; SentEval's C grids), solved to
    convergence.

    SentEval fits each probe from scratch with sklearn's defaults; with today's default (lbfgs, max_iter=100)
    most fits on real sentence embeddings stop unconverged, so the score depends on the iteration cap rather
    than on C. Here every fit is solved to tolerance, and cheaply:
      * binary tasks use solver "newton-cholesky": with 256-1024 features the Hessian is small, so Newton's
        method converges in 2-3 steps where lbfgs needs 60-130 memory-bound passes over the data (measured 2.7x
        less CPU than lbfgs at its default tolerance, and closer to the exact optimum); multi-class TREC keeps
        lbfgs, where the (classes x features)^2 Hessian made Newton slower, but with tol 1e-6: at sklearn's
        default 1e-4 a warm-started lbfgs stops early (on the raw stand-in's TREC folds 51 of 7,644 validation
        predictions differed from the exact optimum's, 1 at 1e-6), and the TREC score then moved by 0.6 points
        when the embeddings moved by 1e-6;
      * each fit starts from the solution for the same C on the previous (heavily overlapping) training split,
        or from the previous C on this split;
      * features are centred on the training split: with an unpenalised intercept that is a reparametrisation
        with the same optimum and the same predictions, which keeps the warm-started intercepts close;
      * float32 features and a single BLAS thread.
    """
    seed: int = SEED
    fasttest: bool = False  # SentEval's fasttest mode: smaller C grids
    solver: str = "newton-cholesky"  # binary problems
    multiclass_solver: str = "lbfgs"
    max_iter: int = 1000
    tol: float = 1e-8  # at sklearn's default 1e-4 the last Newton step was skipped where it still moved a
    # validation prediction: all-MiniLM-L6-v2's MPQA / SUBJ scored 87.62 / 92.17, the optimum's 87.65 / 92.21
    multiclass_tol: float = 1e-6  # lbfgs: see above
    center: bool = True
    warm_start: bool = True
    name: str = "sklearn-converged"
    _warm: dict = field(default_factory=dict, repr=False)

    def _batched(self, y, problems) -> bool:
        """Two-class tasks: all folds solved together (probe_newton); otherwise one scikit-learn fit at a time."""
        return probe_newton.applicable(y, problems)

    @property
    def grid_inner(self) -> list[float]:  # inner CV (MR/CR/SUBJ/MPQA) and dev-split selection (SST-2)
        return [2.0 ** t for t in ((-2, 0, 2) if self.fasttest else range(-2, 4))]

    @property
    def grid_kfold(self) -> list[float]:  # k-fold CV on train (TREC, MRPC)
        return [2.0 ** t for t in ((-1, 1, 3, 5) if self.fasttest else range(-1, 6))]

    def reset(self) -> None:
        """Forget warm starts (called at the start of each task)."""
        self._warm.clear()

    def _fit(self, X, y, C: float, prev=None):
        from sklearn.linear_model import LogisticRegression

        ncls = len(np.unique(y))
        solver, tol = (self.solver, self.tol) if ncls <= 2 else (self.multiclass_solver, self.multiclass_tol)
        key = (C, X.shape[1], ncls)
        init = self._warm.get(key, prev) if self.warm_start else None
        for attempt in (init, None):
            model = LogisticRegression(C=C, solver=solver, random_state=self.seed, max_iter=self.max_iter,
                                       tol=tol, warm_start=attempt is not None)
            if attempt is not None:
                model.coef_, model.intercept_ = attempt[0].copy(), attempt[1].copy()
            try:
                with warnings.catch_warnings(), single_threaded():
                    warnings.simplefilter("ignore")  # convergence is recorded in n_iter_, not printed
                    model.fit(X, y)
                break
            except ValueError:  # a warm start of the wrong shape: start cold
                if attempt is None:
                    raise
        if self.warm_start:
            self._warm[key] = (model.coef_, model.intercept_)
        return model

    def _centred(self, X, tr, *others):
        A = np.asarray(X[tr], dtype=np.float32)
        mu = A.mean(axis=0, dtype=np.float64).astype(np.float32) if self.center else np.zeros(A.shape[1], np.float32)
        return (A - mu, *[None if o is None else np.asarray(o, dtype=np.float32) - mu for o in others])

    def scan(self, X, y, problems, regs, tests=None):
        """For each problem (train idx, validation idx) and each regulariser: validation accuracy, and the
        predictions on tests[problem] if given. Returns (acc [P, R], preds [P][R] or None)."""
        X, y = np.asarray(X), np.asarray(y)
        if self._batched(y, problems):
            return probe_newton.scan(X, y, problems, regs, tests)
        acc = np.zeros((len(problems), len(regs)))
        preds = [[None] * len(regs) for _ in problems] if tests is not None else None
        for p, (tr, va) in enumerate(problems):
            A, V, T = self._centred(X, tr, X[va], None if tests is None else tests[p])
            prev = None
            for C in sorted(regs):  # ascending C: each solution is a good start for the next
                model = self._fit(A, y[tr], C, prev)
                prev = (model.coef_, model.intercept_)
                r = regs.index(C)
                acc[p, r] = _acc(model.predict(V), y[va])
                if preds is not None:
                    preds[p][r] = model.predict(T)
        return acc, preds

    def fit_predict(self, X, y, problems, regs, tests):
        """Fit problem p's training indices with regs[p] (its validation part, if any, is unused: sklearn has no
        early stopping) and predict tests[p]."""
        X, y = np.asarray(X), np.asarray(y)
        if self._batched(y, problems):
            return probe_newton.fit_predict(X, y, problems, regs, tests)
        out = []
        for (tr, _), C, T in zip(problems, regs, tests):
            A, Tc = self._centred(X, tr, T)
            out.append(self._fit(A, y[tr], C).predict(Tc))
        return out

    def settings(self) -> dict:
        return {"classifier": self.name, "model": "LogisticRegression(L2, unpenalised intercept)",
                "solver_binary": self.solver, "solver_multiclass": self.multiclass_solver,
                "max_iter": self.max_iter, "tol_binary": self.tol, "tol_multiclass": self.multiclass_tol,
                "solved_to_convergence": True,
                "centred_features": self.center, "warm_starts": self.warm_start, "dtype": "float32",
                "C_grid_inner_cv": self.grid_inner, "C_grid_kfold": self.grid_kfold,
                "C_grid_dev_split": self.grid_inner, "seed": self.seed, "engine": "fast",
                "two_class_folds": "solved together to the exact optimum (probe_newton: preconditioned Newton, "
                                   f"gradient tolerance {probe_newton.TOL})"}


@dataclass
class TorchLR:
    """SentEval's PyTorch probe with nhid=0 (what SimCSE reported): one linear layer, cross-entropy averaged over
    each mini-batch, L2 as weight decay on all parameters, Adam (test) or RMSprop (fasttest) with torch's
    defaults, a fresh permutation each epoch, and early stopping on a validation set: every `epoch_size` epochs
    the best model so far is kept, and training stops after `tenacity`+1 checks without improvement (the count
    is never reset) or after `max_epoch` epochs.

    Every probe is seeded identically (torch and numpy seed 1111, as SentEval does per probe), so all probes of
    a protocol -- every fold x every regulariser -- are trained together as one batched model, each with its own
    data, permutations, optimiser state and early stopping. That is the same computation as training them one
    by one, at a fraction of the per-step overhead.
    """
    seed: int = SEED
    fasttest: bool = False  # SentEval's fasttest mode: RMSprop, bigger batches, less patience
    optim: str = ""
    batch_size: int = 0
    tenacity: int = 0
    epoch_size: int = 0
    max_epoch: int = 200
    validation_split: float = 0.05  # for refits without a validation set (SentEval's value)
    name: str = "senteval-pytorch"

    def __post_init__(self):
        # SimCSE's settings: test {adam, 64, 5, 4}; fasttest {rmsprop, 128, 3, 2}
        base = dict(optim="rmsprop", batch_size=128, tenacity=3, epoch_size=2) if self.fasttest else \
            dict(optim="adam", batch_size=64, tenacity=5, epoch_size=4)
        for k, v in base.items():
            if not getattr(self, k):
                setattr(self, k, v)
        if self.optim not in ("adam", "rmsprop"):
            raise ValueError(f"optim must be 'adam' or 'rmsprop', not {self.optim!r}")

    grid_inner = grid_kfold = property(lambda self: [10.0 ** t for t in range(-5, -1)])

    def reset(self) -> None:
        pass

    def _split(self, tr, va, rng):
        if va is not None:
            return np.asarray(tr), np.asarray(va)
        perm = rng.permutation(len(tr))  # SentEval: the first draw of the probe's RNG makes the split
        cut = int(self.validation_split * len(tr))
        return np.asarray(tr)[perm[cut:]], np.asarray(tr)[perm[:cut]]

    def _train(self, X, y, problems, wd):
        """Train len(problems) x wd.shape[1] probes; return best (W, b) and best validation accuracy of each."""
        import torch  # imported before single_threaded() so that its thread count is limited too

        with single_threaded(), torch.inference_mode():
            return probe_torch.train(self, X, y, problems, np.asarray(wd, dtype=np.float32))

    def _predict(self, W, b, T):
        import torch

        with torch.no_grad():
            return (torch.from_numpy(np.asarray(T, dtype=np.float32)) @ W.T + b).argmax(-1).numpy()

    def scan(self, X, y, problems, regs, tests=None):
        """Validation accuracy of every (problem, regulariser) probe -- all trained as one batch -- and the best
        probe's predictions on tests[problem] if given (SentEval's refit with the same seed and data would
        reproduce that very probe)."""
        wd = np.tile(np.asarray(regs, dtype=np.float32), (len(problems), 1))
        W, b, acc = self._train(X, y, problems, wd)
        preds = None
        if tests is not None:
            preds = [[self._predict(W[p, r], b[p, r], tests[p]) for r in range(len(regs))]
                     for p in range(len(problems))]
        return acc, preds

    def fit_predict(self, X, y, problems, regs, tests):
        """Train problem p with weight decay regs[p] (early stopping on its validation indices, or on a random
        5% of its training indices when None) and predict tests[p]."""
        W, b, _ = self._train(X, y, problems, np.asarray(regs, dtype=np.float32).reshape(-1, 1))
        return [self._predict(W[p, 0], b[p, 0], T) for p, T in enumerate(tests)]

    def settings(self) -> dict:
        return {"classifier": self.name, "model": "Linear (nhid=0), cross-entropy, L2 via weight decay",
                "optim": self.optim, "lr": 1e-3 if self.optim == "adam" else 1e-2, "batch_size": self.batch_size,
                "tenacity": self.tenacity, "epoch_size": self.epoch_size, "max_epoch": self.max_epoch,
                "refit_validation_split": self.validation_split, "l2_grid": self.grid_inner, "seed": self.seed,
                "batched": "all folds x regularisers of a protocol step trained together", "engine": "fast"}


DEFAULT_CLASSIFIER = "senteval-pytorch"
CLASSIFIERS = {"senteval-pytorch": TorchLR, "sklearn-converged": SklearnLR}
CLASSIFIER_ALIASES = {"torch": "senteval-pytorch", "senteval": "senteval-pytorch", "sklearn": "sklearn-converged"}


def classifier_name(kind: str) -> str:
    """The canonical name of a classifier name or alias ('torch' -> 'senteval-pytorch')."""
    name = CLASSIFIER_ALIASES.get(kind, kind)
    if name not in CLASSIFIERS:
        choices = ", ".join(list(CLASSIFIERS) + list(CLASSIFIER_ALIASES))
        raise ValueError(f"unknown classifier {kind!r} (choose from {choices})")
    return name


def make_classifier(kind: str = DEFAULT_CLASSIFIER, mode: str = "test", seed: int = SEED):
    """The probe ``kind`` (a name or alias) for SentEval's ``mode`` ("test", or "fasttest": smaller grids)."""
    return CLASSIFIERS[classifier_name(kind)](seed=seed, fasttest=mode == "fasttest")


# --------------------------------------------------------------------------------------------------- protocols
def _pick(regs, scores):
    scores = [round(100 * float(s), 2) for s in scores]
    i = int(np.argmax(scores))  # first best, like SentEval
    return regs[i], scores[i]


def inner_kfold(X, y, clf, k: int, seed: int = SEED) -> dict:
    """MR/CR/SUBJ/MPQA: k-fold CV for the test score, and inside each training split a k-fold CV to pick L2."""
    clf.reset()
    X, y = np.asarray(X), np.asarray(y)
    regs = clf.grid_inner
    outer = stratified_folds(y, k, seed)
    problems = [(tr[itr], tr[ite]) for tr, _ in outer for itr, ite in stratified_folds(y[tr], k, seed)]
    acc, _ = clf.scan(X, y, problems, regs)
    picks = [_pick(regs, acc[o * k:(o + 1) * k].mean(axis=0)) for o in range(len(outer))]
    preds = clf.fit_predict(X, y, [(tr, None) for tr, _ in outer], [reg for reg, _ in picks],
                            [X[te] for _, te in outer])
    test = [round(100 * _acc(pr, y[te]), 2) for pr, (_, te) in zip(preds, outer)]
    return {"acc": round(float(np.mean(test)), 2), "devacc": round(float(np.mean([d for _, d in picks])), 2),
            "n": int(len(y)), "fold_acc": test, "chosen_reg": [reg for reg, _ in picks]}


def kfold_then_test(Xtr, ytr, Xte, yte, clf, k: int, seed: int = SEED) -> tuple[dict, np.ndarray]:
    """TREC/MRPC: pick L2 by k-fold CV on train, refit on all of train, score test."""
    clf.reset()
    Xtr, ytr = np.asarray(Xtr), np.asarray(ytr)
    regs = clf.grid_kfold
    acc, _ = clf.scan(Xtr, ytr, stratified_folds(ytr, k, seed), regs)
    reg, devacc = _pick(regs, acc.mean(axis=0))
    yhat = clf.fit_predict(Xtr, ytr, [(np.arange(len(ytr)), None)], [reg], [Xte])[0]
    return {"acc": round(100 * _acc(yhat, yte), 2), "devacc": devacc, "chosen_reg": reg,
            "n_train": int(len(ytr)), "n_test": int(len(yte))}, yhat


def dev_split(Xtr, ytr, Xdev, ydev, Xte, yte, clf) -> dict:
    """SST-2: pick L2 on the dev split, report the test accuracy of the probe trained on train."""
    clf.reset()
    regs = clf.grid_inner
    X = np.concatenate([np.asarray(Xtr), np.asarray(Xdev)])
    y = np.concatenate([np.asarray(ytr), np.asarray(ydev)])
    problem = (np.arange(len(ytr)), np.arange(len(ytr), len(y)))
    acc, preds = clf.scan(X, y, [problem], regs, tests=[Xte])
    reg, devacc = _pick(regs, acc[0])
    yhat = preds[0][regs.index(reg)]
    return {"acc": round(100 * _acc(yhat, yte), 2), "devacc": devacc, "chosen_reg": reg,
            "n_train": int(len(ytr)), "n_dev": int(len(ydev)), "n_test": int(len(yte))}


__all__ = ["SklearnLR", "TorchLR", "make_classifier", "classifier_name", "CLASSIFIERS", "CLASSIFIER_ALIASES",
           "DEFAULT_CLASSIFIER", "stratified_folds", "inner_kfold", "kfold_then_test",
           "dev_split", "SEED"]
