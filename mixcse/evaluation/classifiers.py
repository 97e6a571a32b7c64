"""Logistic-regression probes on frozen embeddings, run the way SentEval runs them.

Three protocols (SentEval's InnerKFoldClassifier, KFoldClassifier and SplitClassifier) and two classifier
back-ends (SentEval's `usepytorch=False` scikit-learn path and its `usepytorch=True` PyTorch path, which SimCSE
used). Fold splits, seeds, grids, the order of the data and the rounding of intermediate scores follow SentEval,
because each of them moves the reported accuracy.

Speed: a probe is refit hundreds of times per task (600 fits for one 10-fold inner-CV task). The sklearn path
solves each fit to convergence from a warm start on centred features (see `SklearnLR`); the torch path trains
all regularisation strengths of one split as one batched model -- SentEval seeds every probe identically, so
they all see the same batch order anyway. Both run on one thread: the problems are too small to share.
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
from sklearn.model_selection import StratifiedKFold

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
    """scikit-learn LogisticRegression (lbfgs, L2 on the weights, unpenalised intercept; SentEval's C grids),
    solved to convergence.

    SentEval fits each probe from scratch with sklearn's defaults; with today's lbfgs default and max_iter=100
    most fits on real sentence embeddings stop unconverged (the score then depends on the iteration cap, not on
    C). Here every fit runs to lbfgs's tolerance, and three exact shortcuts make that cheap:
      * features are centred on the training split -- with an unpenalised intercept this is a
        reparametrisation with the same optimum and predictions, but far better conditioned (embeddings
        share a large common component);
      * each fit starts from the solution for the same C on the previous (heavily overlapping) training split,
        or from the previous C on this split;
      * float32 features and a single BLAS thread.
    """
    seed: int = SEED
    fast: bool = False
    max_iter: int = 1000
    tol: float = 1e-4  # sklearn's default
    center: bool = True
    warm_start: bool = True
    name: str = "sklearn"
    _warm: dict = field(default_factory=dict, repr=False)

    @property
    def grid_inner(self) -> list[float]:  # inner CV (MR/CR/SUBJ/MPQA) and dev-split selection (SST-2)
        return [2.0 ** t for t in ((-2, 0, 2) if self.fast else range(-2, 4))]

    @property
    def grid_kfold(self) -> list[float]:  # k-fold CV on train (TREC, MRPC)
        return [2.0 ** t for t in ((-1, 1, 3, 5) if self.fast else range(-1, 6))]

    def reset(self) -> None:
        """Forget warm starts (called at the start of each task)."""
        self._warm.clear()

    def _fit(self, X, y, C: float, init=None):
        from sklearn.linear_model import LogisticRegression

        model = LogisticRegression(C=C, random_state=self.seed, max_iter=self.max_iter, tol=self.tol,
                                   warm_start=self.warm_start)
        if self.warm_start and init is not None:
            model.coef_, model.intercept_ = init[0].copy(), init[1].copy()
        with warnings.catch_warnings(), single_threaded():
            warnings.simplefilter("ignore")  # a ConvergenceWarning is recorded in n_iter_, not printed
            try:
                model.fit(X, y)
            except ValueError:  # a warm start of the wrong shape (class missing in a split): start cold
                model = LogisticRegression(C=C, random_state=self.seed, max_iter=self.max_iter, tol=self.tol)
                model.fit(X, y)
        key = (C, X.shape[1], len(model.classes_))
        if self.warm_start:
            self._warm[key] = (model.coef_, model.intercept_)
        return model

    def _prepare(self, X, *others):
        X = np.asarray(X, dtype=np.float32)
        others = [np.asarray(o, dtype=np.float32) for o in others]
        if self.center:
            mu = X.mean(axis=0, dtype=np.float64).astype(np.float32)
            return (X - mu, *[o - mu for o in others])
        return (X, *others)

    def _init(self, C, X, y, prev):
        return self._warm.get((C, X.shape[1], len(np.unique(y))), prev)

    def scan(self, X, y, Xv, yv, regs) -> list[float]:
        """Validation accuracy of a probe fit on (X, y) for each regulariser, in order of `regs`."""
        X, Xv = self._prepare(X, Xv)
        scores, prev = {}, None
        for C in sorted(regs):  # ascending C: each solution is a good start for the next
            model = self._fit(X, y, C, self._init(C, X, y, prev))
            prev = (model.coef_, model.intercept_)
            scores[C] = _acc(model.predict(Xv), yv)
        return [scores[C] for C in regs]

    def fit_predict(self, X, y, Xt, reg, validation=None) -> np.ndarray:
        X, Xt = self._prepare(X, Xt)
        return self._fit(X, y, reg, self._init(reg, X, y, None)).predict(Xt)

    def settings(self) -> dict:
        return {"classifier": "sklearn", "model": "LogisticRegression(lbfgs, L2, unpenalised intercept)",
                "max_iter": self.max_iter, "tol": self.tol, "solved_to_convergence": True,
                "centred_features": self.center, "warm_starts": self.warm_start, "dtype": "float32",
                "C_grid_inner_cv": self.grid_inner, "C_grid_kfold": self.grid_kfold,
                "C_grid_dev_split": self.grid_inner, "seed": self.seed}


@dataclass
class TorchLR:
    """SentEval's PyTorch probe with nhid=0: one Linear layer, cross-entropy, weight decay as L2, early stopping
    on a validation set (patience `tenacity`, checked every `epoch_size` epochs)."""
    seed: int = SEED
    fast: bool = False
    optim: str = ""
    batch_size: int = 0
    tenacity: int = 0
    epoch_size: int = 0
    max_epoch: int = 200
    name: str = "torch"
    _cfg: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        # SimCSE's settings: test {adam, 64, 5, 4}; fasttest {rmsprop, 128, 3, 2}
        base = dict(optim="rmsprop", batch_size=128, tenacity=3, epoch_size=2) if self.fast else \
            dict(optim="adam", batch_size=64, tenacity=5, epoch_size=4)
        for k, v in base.items():
            if not getattr(self, k):
                setattr(self, k, v)

    grid_inner = grid_kfold = property(lambda self: [10.0 ** t for t in range(-5, -1)])

    def _train(self, X, y, regs, validation=None, validation_split=None):
        """Train one probe per regulariser (batched); return their best states and best validation accuracies."""
        import torch  # noqa: F401  (imported before single_threaded() so that its threads are limited too)

        with single_threaded():
            return self._train_batched(X, y, regs, validation, validation_split)

    def _train_batched(self, X, y, regs, validation, validation_split):
        import torch

        rng = np.random.RandomState(self.seed)
        torch.manual_seed(self.seed)
        X = np.asarray(X, dtype=np.float32)
        y = np.asarray(y, dtype=np.int64)
        if validation is not None:
            Xtr, ytr, Xv, yv = X, y, np.asarray(validation[0], dtype=np.float32), np.asarray(validation[1])
        else:
            perm = rng.permutation(len(X))
            cut = int(validation_split * len(X))
            Xtr, ytr, Xv, yv = X[perm[cut:]], y[perm[cut:]], X[perm[:cut]], y[perm[:cut]]
        nclasses = int(max(y.max(), np.max(yv) if len(yv) else 0)) + 1
        R, d = len(regs), X.shape[1]
        init = torch.nn.Linear(d, nclasses)  # same seed -> same initial weights for every regulariser
        W = init.weight.detach().unsqueeze(0).repeat(R, 1, 1).requires_grad_()
        b = init.bias.detach().unsqueeze(0).repeat(R, 1).requires_grad_()
        wd = torch.tensor(regs, dtype=torch.float32)
        if self.optim == "adam":
            opt = torch.optim.Adam([W, b])
        elif self.optim == "rmsprop":
            opt = torch.optim.RMSprop([W, b])
        else:
            opt = torch.optim.SGD([W, b], lr=0.1)
        tX, ty = torch.from_numpy(Xtr), torch.from_numpy(ytr)
        vX, vy = torch.from_numpy(Xv), torch.from_numpy(np.asarray(yv, dtype=np.int64))
        best = np.full(R, -1.0)
        best_W, best_b = W.detach().clone(), b.detach().clone()
        stopped = np.zeros(R, dtype=bool)
        count = np.zeros(R, dtype=int)
        nepoch = 0
        n = len(Xtr)
        while not stopped.all() and nepoch <= self.max_epoch:
            for _ in range(self.epoch_size):
                perm = torch.from_numpy(rng.permutation(n))
                for start in range(0, n, self.batch_size):
                    idx = perm[start:start + self.batch_size]
                    xb, yb = tX[idx], ty[idx]
                    logits = torch.baddbmm(b.unsqueeze(1), xb.unsqueeze(0).expand(R, -1, -1), W.transpose(1, 2))
                    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, nclasses), yb.repeat(R)) * R
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    with torch.no_grad():  # L2 as torch's weight_decay does it: grad += wd * param
                        W.grad.add_(W.detach() * wd.view(R, 1, 1))
                        b.grad.add_(b.detach() * wd.view(R, 1))
                    opt.step()
            nepoch += self.epoch_size
            with torch.no_grad():
                pred = torch.baddbmm(b.unsqueeze(1), vX.unsqueeze(0).expand(R, -1, -1), W.transpose(1, 2)).argmax(-1)
                accs = (pred == vy.unsqueeze(0)).float().mean(1).numpy() if len(vy) else np.zeros(R)
            for r in range(R):
                if stopped[r]:
                    continue
                if accs[r] > best[r]:
                    best[r] = accs[r]
                    best_W[r], best_b[r] = W.detach()[r], b.detach()[r]
                else:
                    if count[r] >= self.tenacity:
                        stopped[r] = True
                    count[r] += 1
        return best_W, best_b, [float(a) for a in best]

    def scan(self, X, y, Xv, yv, regs) -> list[float]:
        return self._train(X, y, list(regs), validation=(Xv, yv))[2]

    def fit_predict(self, X, y, Xt, reg, validation=None) -> np.ndarray:
        import torch

        if validation is None:
            W, b, _ = self._train(X, y, [reg], validation_split=0.05)
        else:
            W, b, _ = self._train(X, y, [reg], validation=validation)
        with torch.no_grad():
            logits = torch.from_numpy(np.asarray(Xt, dtype=np.float32)) @ W[0].T + b[0]
        return logits.argmax(-1).numpy()

    def settings(self) -> dict:
        return {"classifier": "torch", "model": "Linear (nhid=0), cross-entropy, L2 via weight decay",
                "optim": self.optim, "batch_size": self.batch_size, "tenacity": self.tenacity,
                "epoch_size": self.epoch_size, "max_epoch": self.max_epoch, "refit_validation_split": 0.05,
                "l2_grid": self.grid_inner, "seed": self.seed}


def make_classifier(kind: str = "sklearn", mode: str = "test", seed: int = SEED):
    fast = mode == "fasttest"
    if kind == "sklearn":
        return SklearnLR(seed=seed, fast=fast)
    if kind == "torch":
        return TorchLR(seed=seed, fast=fast)
    raise ValueError(f"unknown classifier {kind!r} (use 'sklearn' or 'torch')")


# --------------------------------------------------------------------------------------------------- protocols
def _reset(clf) -> None:
    if hasattr(clf, "reset"):
        clf.reset()


def _pick(regs, scores):
    scores = [round(100 * s, 2) for s in scores]
    i = int(np.argmax(scores))  # first best, like SentEval
    return regs[i], scores[i]


def inner_kfold(X, y, clf, k: int, seed: int = SEED) -> dict:
    """MR/CR/SUBJ/MPQA: k-fold CV for the test score, and inside each training split a k-fold CV to pick L2."""
    _reset(clf)
    X, y = np.asarray(X), np.asarray(y)
    regs = clf.grid_inner
    dev, test, chosen = [], [], []
    for tr, te in stratified_folds(y, k, seed):
        Xtr, ytr = X[tr], y[tr]
        per_reg = np.zeros(len(regs))
        for itr, ite in stratified_folds(ytr, k, seed):
            per_reg += np.asarray(clf.scan(Xtr[itr], ytr[itr], Xtr[ite], ytr[ite], regs))
        reg, devacc = _pick(regs, per_reg / k)
        chosen.append(reg)
        dev.append(devacc)
        test.append(round(100 * _acc(clf.fit_predict(Xtr, ytr, X[te], reg), y[te]), 2))
    return {"acc": round(float(np.mean(test)), 2), "devacc": round(float(np.mean(dev)), 2),
            "n": int(len(y)), "fold_acc": test, "chosen_reg": chosen}


def kfold_then_test(Xtr, ytr, Xte, yte, clf, k: int, seed: int = SEED) -> tuple[dict, np.ndarray]:
    """TREC/MRPC: pick L2 by k-fold CV on train, refit on all of train, score test."""
    _reset(clf)
    Xtr, ytr = np.asarray(Xtr), np.asarray(ytr)
    regs = clf.grid_kfold
    per_reg = np.zeros(len(regs))
    for tr, te in stratified_folds(ytr, k, seed):
        per_reg += np.asarray(clf.scan(Xtr[tr], ytr[tr], Xtr[te], ytr[te], regs))
    reg, devacc = _pick(regs, per_reg / k)
    yhat = clf.fit_predict(Xtr, ytr, Xte, reg)
    return {"acc": round(100 * _acc(yhat, yte), 2), "devacc": devacc, "chosen_reg": reg,
            "n_train": int(len(ytr)), "n_test": int(len(yte))}, yhat


def dev_split(Xtr, ytr, Xdev, ydev, Xte, yte, clf) -> dict:
    """SST-2: pick L2 on the dev split, report the test accuracy of the probe trained on train."""
    _reset(clf)
    regs = clf.grid_inner
    reg, devacc = _pick(regs, clf.scan(Xtr, ytr, Xdev, ydev, regs))
    yhat = clf.fit_predict(Xtr, ytr, Xte, reg, validation=(Xdev, ydev))
    return {"acc": round(100 * _acc(yhat, yte), 2), "devacc": devacc, "chosen_reg": reg,
            "n_train": int(len(ytr)), "n_dev": int(len(ydev)), "n_test": int(len(yte))}


__all__ = ["SklearnLR", "TorchLR", "make_classifier", "stratified_folds", "inner_kfold", "kfold_then_test",
           "dev_split", "SEED"]
