"""Logistic-regression probes on frozen embeddings, run the way SentEval runs them.

Three protocols (SentEval's InnerKFoldClassifier, KFoldClassifier and SplitClassifier) and two classifier
back-ends, chosen by name with `make_classifier(name, mode)`:
  * "senteval-pytorch" (`TorchLR`, the default; aliases "torch", "senteval"): SentEval's `usepytorch=True` probe,
    the one SimCSE and MixCSE reported -- Adam, early stopping, L2 as weight decay;
  * "sklearn-converged" (`SklearnLR`; alias "sklearn"): scikit-learn LogisticRegression on SentEval's C grids,
    every fit solved to convergence (SentEval's `usepytorch=False` path, minus its iteration cap).
Fold splits, seeds, grids, the order of the data and the rounding of intermediate scores follow SentEval,
because each of them moves the reported accuracy. docs/evaluation-protocol.md says why the two back-ends differ.

Speed: a probe is refit hundreds of times per task (600 fits for one 10-fold inner-CV task). Each back-end has
two engines (`engine=`): "fast", the default, and "reference", the plain loop the fast one is tested against.
The torch path trains all folds x regularisation strengths of a protocol step as one batched model --
SentEval seeds every probe identically, so they all see the same batch order anyway -- and its fast engine
(`batched_probe`) does the same computation in fewer, larger kernels. The sklearn path's reference solves each
fit with scikit-learn's Newton steps from a warm start (see `SklearnLR`); its fast engine (`batched_logreg`)
solves all folds of a two-class task together to the exact optimum. Both run on one thread: the problems are
too small to share.
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
from sklearn.model_selection import StratifiedKFold

from mixcse.evaluation import batched_logreg, batched_probe

SEED = 1111
ENGINES = ("fast", "reference")  # every probe has a fast path and the plain one it is tested against


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
    fast: bool = False
    solver: str = "newton-cholesky"  # binary problems
    multiclass_solver: str = "lbfgs"
    max_iter: int = 1000
    tol: float = 1e-8  # at sklearn's default 1e-4 the last Newton step was skipped where it still moved a
    # validation prediction: all-MiniLM-L6-v2's MPQA / SUBJ scored 87.62 / 92.17, the optimum's 87.65 / 92.21
    multiclass_tol: float = 1e-6  # lbfgs: see above
    center: bool = True
    warm_start: bool = True
    engine: str = "fast"  # all folds of a task together (batched_logreg); "reference": one scikit-learn fit at a time
    name: str = "sklearn-converged"
    _warm: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {self.engine!r}")

    def _batched(self, y, problems) -> bool:
        return self.engine == "fast" and batched_logreg.applicable(y, problems)

    @property
    def grid_inner(self) -> list[float]:  # inner CV (MR/CR/SUBJ/MPQA) and dev-split selection (SST-2)
        return [2.0 ** t for t in ((-2, 0, 2) if self.fast else range(-2, 4))]

    @property
    def grid_kfold(self) -> list[float]:  # k-fold CV on train (TREC, MRPC)
        return [2.0 ** t for t in ((-1, 1, 3, 5) if self.fast else range(-1, 6))]

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
            return batched_logreg.scan(X, y, problems, regs, tests)
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
            return batched_logreg.fit_predict(X, y, problems, regs, tests)
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
                "C_grid_dev_split": self.grid_inner, "seed": self.seed, "engine": self.engine,
                **({"two_class_folds": "solved together to the exact optimum (batched_logreg: preconditioned "
                                       f"Newton, gradient tolerance {batched_logreg.TOL})"}
                   if self.engine == "fast" else {})}


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
    fast: bool = False
    optim: str = ""
    batch_size: int = 0
    tenacity: int = 0
    epoch_size: int = 0
    max_epoch: int = 200
    validation_split: float = 0.05  # for refits without a validation set (SentEval's value)
    engine: str = "fast"  # "reference": the plain batched loop the fast one is tested against
    name: str = "senteval-pytorch"

    def __post_init__(self):
        # SimCSE's settings: test {adam, 64, 5, 4}; fasttest {rmsprop, 128, 3, 2}
        base = dict(optim="rmsprop", batch_size=128, tenacity=3, epoch_size=2) if self.fast else \
            dict(optim="adam", batch_size=64, tenacity=5, epoch_size=4)
        for k, v in base.items():
            if not getattr(self, k):
                setattr(self, k, v)
        if self.optim not in ("adam", "rmsprop"):
            raise ValueError(f"optim must be 'adam' or 'rmsprop', not {self.optim!r}")
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {self.engine!r}")

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

        wd = np.asarray(wd, dtype=np.float32)
        with single_threaded():
            if self.engine == "reference":
                with torch.no_grad():
                    return self._train_batched(X, y, problems, wd)
            with torch.inference_mode():
                return batched_probe.train(self, X, y, problems, wd)

    def _train_batched(self, X, y, problems, wd):
        import torch

        P, R = wd.shape
        X = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))
        y_np = np.asarray(y, dtype=np.int64)
        yt = torch.from_numpy(y_np)
        d, ncls, B = X.shape[1], int(y_np.max()) + 1, self.batch_size
        rngs = [np.random.RandomState(self.seed) for _ in range(P)]
        splits = [self._split(tr, va, rng) for (tr, va), rng in zip(problems, rngs)]
        torch.manual_seed(self.seed)
        init = torch.nn.Linear(d, ncls)  # same seed -> the same initial weights for every probe
        best_W = init.weight.detach().expand(P, R, ncls, d).clone()
        best_b = init.bias.detach().expand(P, R, ncls).clone()
        best_acc = np.full((P, R), -1.0)
        count = np.zeros((P, R), dtype=int)
        stopped = np.zeros((P, R), dtype=bool)

        alive = np.arange(P)  # problems with at least one probe still training
        W, b = best_W.clone(), best_b.clone()
        m1W, m1b = torch.zeros_like(W), torch.zeros_like(b)  # Adam first moments (unused by RMSprop)
        m2W, m2b = torch.zeros_like(W), torch.zeros_like(b)  # second moments / RMSprop square averages
        steps = torch.zeros(P)
        wdt = torch.from_numpy(wd)
        val_idx, val_mask, n_val = self._padded([splits[p][1] for p in range(P)])
        lr = 1e-3 if self.optim == "adam" else 1e-2
        beta1, beta2, alpha, eps = 0.9, 0.999, 0.99, 1e-8
        nepoch = 0
        while len(alive) and nepoch <= self.max_epoch:
            alive_t = torch.from_numpy(alive)
            for _ in range(self.epoch_size):
                order = [splits[p][0][rngs[p].permutation(len(splits[p][0]))] for p in alive]
                idx_all, mask_all, _ = self._padded(order, multiple=B)
                for start in range(0, idx_all.shape[1], B):
                    idx, mask = idx_all[:, start:start + B], mask_all[:, start:start + B]
                    cnt = mask.sum(1)
                    xb = X[idx]  # (A, B, d)
                    logits = torch.bmm(xb, W.reshape(len(alive), R * ncls, d).transpose(1, 2))
                    logits = logits.view(len(alive), -1, R, ncls) + b.unsqueeze(1)
                    g = torch.softmax(logits, dim=-1)
                    g.scatter_add_(-1, yt[idx].view(len(alive), -1, 1, 1).expand(-1, -1, R, 1),
                                   torch.full((1, 1, 1, 1), -1.0).expand(len(alive), idx.shape[1], R, 1))
                    # mean over the batch: SentEval sets loss_fn.size_average=False after construction, which
                    # torch >= 1.0 ignores, so the loss SimCSE ran with is the batch mean
                    g.mul_((mask / cnt.clamp(min=1).unsqueeze(1)).view(len(alive), -1, 1, 1))
                    gW = torch.bmm(g.reshape(len(alive), -1, R * ncls).transpose(1, 2), xb).view_as(W)
                    gb = g.sum(1)
                    wda = wdt[alive_t]
                    gW.add_(W * wda.view(-1, R, 1, 1))  # L2 as torch's weight_decay: grad += wd * param
                    gb.add_(b * wda.view(-1, R, 1))
                    act = cnt > 0  # a problem whose epoch has ended takes no step
                    steps[alive_t] += act.float()
                    a4, a3 = act.view(-1, 1, 1, 1).float(), act.view(-1, 1, 1).float()
                    st = steps[alive_t]
                    if self.optim == "adam":
                        for prm, grad, mom, sq, a in ((W, gW, m1W, m2W, a4), (b, gb, m1b, m2b, a3)):
                            mom.mul_(1 - a * (1 - beta1)).add_(a * (1 - beta1) * grad)
                            sq.mul_(1 - a * (1 - beta2)).add_(a * (1 - beta2) * grad * grad)
                            shape = (-1,) + (1,) * (mom.dim() - 1)
                            bc1 = (1 - beta1 ** st.clamp(min=1)).view(shape)
                            bc2 = (1 - beta2 ** st.clamp(min=1)).view(shape)
                            prm.sub_(a * (lr / bc1) * mom / (sq.sqrt() / bc2.sqrt() + eps))
                    else:
                        for prm, grad, sq, a in ((W, gW, m2W, a4), (b, gb, m2b, a3)):
                            sq.mul_(1 - a * (1 - alpha)).add_(a * (1 - alpha) * grad * grad)
                            prm.sub_(a * lr * grad / (sq.sqrt() + eps))
            nepoch += self.epoch_size
            vi, vm = val_idx[alive_t], val_mask[alive_t]
            vlog = torch.bmm(X[vi], W.reshape(len(alive), R * ncls, d).transpose(1, 2))
            pred = (vlog.view(len(alive), -1, R, ncls) + b.unsqueeze(1)).argmax(-1)
            correct = ((pred == yt[vi].unsqueeze(-1)) & vm.unsqueeze(-1)).sum(1).numpy()
            accs = correct / np.maximum(n_val[alive], 1)[:, None]
            for i, p in enumerate(alive):
                for r in range(R):
                    if stopped[p, r]:
                        continue
                    if accs[i, r] > best_acc[p, r]:
                        best_acc[p, r] = accs[i, r]
                        best_W[p, r], best_b[p, r] = W[i, r], b[i, r]
                    else:
                        if count[p, r] >= self.tenacity:
                            stopped[p, r] = True
                        count[p, r] += 1
            keep = ~stopped[alive].all(axis=1)
            if not keep.all():
                k = torch.from_numpy(np.flatnonzero(keep))
                W, b, m1W, m1b, m2W, m2b = (t[k] for t in (W, b, m1W, m1b, m2W, m2b))
                alive = alive[keep]
        return best_W, best_b, best_acc

    @staticmethod
    def _padded(rows, multiple: int = 1):
        import torch

        n = np.asarray([len(r) for r in rows], dtype=np.int64)
        width = max(int(n.max()) if len(n) else 0, 1)
        width = -(-width // multiple) * multiple
        idx = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=bool)
        for i, r in enumerate(rows):
            idx[i, :len(r)] = r
            mask[i, :len(r)] = True
        return torch.from_numpy(idx), torch.from_numpy(mask), n

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
                "batched": "all folds x regularisers of a protocol step trained together", "engine": self.engine}


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


def make_classifier(kind: str = DEFAULT_CLASSIFIER, mode: str = "test", seed: int = SEED, engine: str = "fast"):
    return CLASSIFIERS[classifier_name(kind)](seed=seed, fast=mode == "fasttest", engine=engine)


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
