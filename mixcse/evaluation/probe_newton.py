"""The fast engine of the sklearn-converged probe: many L2-regularised logistic regressions on subsets of one
feature matrix, solved together to the exact optimum.

    solve(Xa, labels, members, C, W0=None, tol=TOL, classes=2) -> W     # one C for all problems
    scan(X, y, problems, Cs, tests=None)  -> (acc [P, R], preds [P][R] or None)
    fit_predict(X, y, problems, Cs, tests) -> [predictions per problem]
    applicable(y, problems, max_classes=MAX_CLASSES) -> bool   # what the probe routes here: two classes

The objective is scikit-learn's LogisticRegression's: C * sum(log-loss over the problem's rows) + |w|^2 / 2 with
an unpenalised intercept, one logit for two classes and one per class (multinomial) otherwise; predictions are
`LogisticRegression.predict`'s (the positive side of the binary logit, else the first largest logit). Every
problem is a 0/1 membership row over the shared matrix, so one matrix product evaluates all problems at once
(scan: all folds of a task, one C at a time, warm-started from the previous C's solutions, ascending). Each
iteration is an inexact Newton step by conjugate gradients, preconditioned with the Hessian averaged over the
problems (factorised once per C) -- within the sampling noise of overlapping folds of each problem's own -- and
a backtracking line search per problem. The stopping rule is
scikit-learn's (the largest gradient entry of the objective divided by C times the number of rows), at a
tolerance far below its default: the solutions are the exact optima that scikit-learn's solvers approach.
"""
from __future__ import annotations

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.special import expit

TOL = 1e-10  # scikit-learn's default is 1e-4; the optimum is unique, so a tighter stop only removes solver noise
MAX_ITER = 500
MIN_PROBLEMS = 2
# Routed here: two-class tasks. `solve` handles several classes too (tested against exact fits), but on
# all-MiniLM-L6-v2's TREC (6 classes) it took as long as scikit-learn's lbfgs (27 s), so those stay there.
MAX_CLASSES = 2
CG_RTOL, CG_MAX = 1e-2, 50  # inexact Newton: each step solved to 1% of the gradient's norm


class _Model:
    """Logistic regression on shared rows: K = 1 logit (two classes, scikit-learn's binary model) or K logits
    (multinomial) per problem, weights W (P, K, D) whose last column is the unpenalised intercept."""

    def __init__(self, Xa, labels, members, C, K):
        self.Xa, self.members, self.C, self.K = Xa, members, C, K
        self.Y = labels[:, None, None] if K == 1 else np.eye(K)[labels][:, None, :]  # (n, 1, K) targets
        self.rows = members.T[:, :, None]  # (n, P, 1)
        self.pen = np.ones(Xa.shape[1])
        self.pen[-1] = 0.0

    def logits(self, W):
        P, K, D = W.shape
        return (self.Xa @ W.reshape(P * K, D).T).reshape(-1, P, K)

    def _back(self, T, W):  # (n, P, K) row weights -> (P, K, D), plus the penalty's share
        n, P, K = T.shape
        return (T.reshape(n, P * K).T @ self.Xa).reshape(P, K, -1) + W * self.pen

    def probs(self, Z):
        if self.K == 1:
            return expit(Z)
        E = np.exp(Z - Z.max(-1, keepdims=True))
        return E / E.sum(-1, keepdims=True)

    def objective(self, Z, W):
        if self.K == 1:
            loss = np.logaddexp(0.0, Z[..., 0]) - self.Y[..., 0] * Z[..., 0]
        else:
            m = Z.max(-1, keepdims=True)
            loss = (m[..., 0] + np.log(np.exp(Z - m).sum(-1))) - (Z * self.Y).sum(-1)
        return self.C * np.einsum("np,pn->p", loss, self.members) + 0.5 * np.einsum("pkd,pkd->p", W[..., :-1],
                                                                                    W[..., :-1])

    def gradient(self, S, W):
        return self._back(self.C * (S - self.Y) * self.rows, W)

    def hessian_times(self, S, V):
        Zv = self.logits(V)
        T = S * (1 - S) * Zv if self.K == 1 else S * (Zv - (S * Zv).sum(-1, keepdims=True))
        return self._back(self.C * T * self.rows, V)

    def preconditioner(self, S, todo):
        """The Hessian averaged over the open problems, Cholesky-factorised: a function R (P, K, D) -> H^-1 R.
        Several classes: all K x K blocks (the cross-class ones matter), and a ridge of 1e-10 of the largest
        diagonal entry on the intercepts, where adding one number to every class's intercept changes nothing."""
        D, K = self.Xa.shape[1], self.K
        Sm = S[:, todo] * self.rows[:, todo] * self.C  # (n, open, K): C m_p S_pk
        H = np.zeros((K * D, K * D))
        for k in range(K):
            for j in range(k, K):
                if K == 1:
                    w = (Sm[..., 0] * (1 - S[:, todo, 0])).mean(1)
                else:  # d2/dz_k dz_j of log-sum-exp: S_k (delta_kj - S_j)
                    w = ((Sm[..., k] if k == j else 0.0) - Sm[..., k] * S[:, todo, j]).mean(1)
                block = self.Xa.T @ (self.Xa * w[:, None])
                H[k * D:(k + 1) * D, j * D:(j + 1) * D] = block
                H[j * D:(j + 1) * D, k * D:(k + 1) * D] = block.T
        H[np.diag_indices(K * D)] += np.tile(self.pen, K)
        if K > 1:
            ends = np.arange(1, K + 1) * D - 1
            H[ends, ends] += 1e-10 * H.diagonal().max()
        factor = cho_factor(H)
        return lambda R: cho_solve(factor, R.reshape(len(R), -1).T).T.reshape(R.shape)


def _dot(A, B):
    return np.einsum("pkd,pkd->p", A, B)


def solve(Xa: np.ndarray, labels: np.ndarray, members: np.ndarray, C: float, W0: np.ndarray | None = None,
          tol: float = TOL, max_iter: int = MAX_ITER, classes: int = 2) -> np.ndarray:
    """Xa (n, d+1) float64 with a last column of ones; labels (n,) in 0..classes-1; members (P, n) 0/1 rows.
    Returns W (P, d+1) for two classes (the weights of class 1 against class 0, as scikit-learn's binary model),
    else (P, classes, d+1): weights and intercept of each problem's optimum."""
    K = 1 if classes == 2 else classes
    P, D = members.shape[0], Xa.shape[1]
    model = _Model(Xa, np.asarray(labels, dtype=np.int64 if K > 1 else np.float64), members, C, K)
    W = np.zeros((P, K, D)) if W0 is None else np.array(W0, dtype=np.float64).reshape(P, K, D)
    scale = C * members.sum(1)  # scikit-learn's gradient scale: C x rows
    precondition = None
    Z = model.logits(W)
    for _ in range(max_iter):
        S = model.probs(Z)
        G = model.gradient(S, W)
        todo = np.abs(G).reshape(P, -1).max(1) / scale > tol
        if not todo.any():
            break
        if precondition is None:  # the Hessian averaged over the open problems, once per solve
            precondition = model.preconditioner(S, todo)
        step = _newton_step(model, S, G, todo, precondition)
        ZS = model.logits(step)
        f0 = model.objective(Z, W)
        slope = _dot(G, step)
        t = np.ones(P)
        for _ in range(40):  # backtracking (Armijo); rounding slack for steps that only polish the last digits
            ft = model.objective(Z + ZS * t[:, None], W + step * t[:, None, None])
            ok = ft <= f0 + 1e-4 * t * slope + 1e-13 * np.abs(f0)
            if ok.all():
                break
            t[~ok] *= 0.5
        W = W + step * t[:, None, None]
        Z = model.logits(W)
    return W[:, 0] if K == 1 else W


def _newton_step(model, S, G, todo, precondition, rtol=CG_RTOL, max_cg=CG_MAX):
    """Each open problem's Newton step H_p x = -G_p by conjugate gradients preconditioned with the shared
    Hessian; Hessian-vector products of all problems are two matrix products."""
    x = np.zeros_like(G)
    r = np.where(todo[:, None, None], -G, 0.0)
    z = precondition(r)
    p = z.copy()
    rz = _dot(r, z)
    target = rtol * np.sqrt(_dot(r, r))
    for _ in range(max_cg):
        live = np.sqrt(_dot(r, r)) > target
        if not live.any():
            break
        Hp = model.hessian_times(S, p)
        pHp = _dot(p, Hp)
        alpha = np.where(live, rz / np.where(live & (pHp > 0), pHp, 1.0), 0.0)
        x += alpha[:, None, None] * p
        r -= alpha[:, None, None] * Hp
        z = precondition(r)
        rz_new = _dot(r, z)
        beta = np.where(live, rz_new / np.where(rz > 0, rz, 1.0), 0.0)
        p = z + beta[:, None, None] * p
        rz = rz_new
    return x


def _augment(X: np.ndarray, mean: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64) - mean  # centring is a reparametrisation (free intercept): conditioning
    return np.concatenate([X, np.ones((len(X), 1))], axis=1)


def _members(problems, n: int) -> np.ndarray:
    M = np.zeros((len(problems), n))
    for p, (tr, _) in enumerate(problems):
        M[p, tr] = 1.0
    return M


def _predict(Xa_rows, W, classes):
    """scikit-learn's rule: class 1 where the binary logit is positive; else the first largest logit."""
    if W.ndim == 1:
        return classes[(Xa_rows @ W > 0).astype(int)]
    return classes[np.argmax(Xa_rows @ W.T, axis=1)]


def _labels(y, classes):
    return np.searchsorted(classes, y)


def scan(X, y, problems, Cs, tests=None):
    X, y = np.asarray(X), np.asarray(y)
    classes = np.unique(y)
    mean = X.mean(axis=0, dtype=np.float64)
    Xa, labels = _augment(X, mean), _labels(y, classes)
    members = _members(problems, len(y))
    acc = np.zeros((len(problems), len(Cs)))
    preds = [[None] * len(Cs) for _ in problems] if tests is not None else None
    Ta = None if tests is None else [_augment(T, mean) for T in tests]
    W = None
    for C in sorted(Cs):  # ascending C: each solution is a good start for the next
        W = solve(Xa, labels, members, C, W, classes=len(classes))
        r = list(Cs).index(C)
        for p, (_, va) in enumerate(problems):
            acc[p, r] = float(np.mean(_predict(Xa[va], W[p], classes) == y[va])) if len(va) else float("nan")
            if preds is not None:
                preds[p][r] = _predict(Ta[p], W[p], classes)
    return acc, preds


def fit_predict(X, y, problems, Cs, tests):
    X, y = np.asarray(X), np.asarray(y)
    classes = np.unique(y)
    mean = X.mean(axis=0, dtype=np.float64)
    Xa, labels = _augment(X, mean), _labels(y, classes)
    out = [None] * len(problems)
    W = None
    for C in sorted(set(Cs)):  # one shared Hessian per C; ascending, each group starts from the last solution
        group = [p for p, c in enumerate(Cs) if c == C]
        start = None if W is None else np.repeat(W.mean(0, keepdims=True), len(group), axis=0)
        W = solve(Xa, labels, _members([problems[p] for p in group], len(y)), C, start, classes=len(classes))
        for w, p in zip(W, group):
            out[p] = _predict(_augment(tests[p], mean), w, classes)
    return out


def applicable(y, problems, max_classes: int = MAX_CLASSES) -> bool:
    """At most `max_classes` classes, each in every problem's training rows (scikit-learn would fit another
    model otherwise), and enough problems to share the work (one problem alone, e.g. SST-2's dev split, is
    solved faster by scikit-learn's own Newton solver)."""
    y = np.asarray(y)
    k = len(np.unique(y))
    return len(problems) >= MIN_PROBLEMS and 2 <= k <= max_classes and \
        all(len(np.unique(y[tr])) == k for tr, _ in problems)


__all__ = ["solve", "scan", "fit_predict", "applicable", "TOL"]
