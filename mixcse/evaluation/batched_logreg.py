"""The fast engine of the sklearn-converged probe for two-class tasks: many L2-regularised logistic regressions
on subsets of one feature matrix, solved together to the exact optimum.

    solve(X, y01, members, C, W0=None, tol=TOL) -> W          # one C for all problems
    scan(X, y, problems, Cs, tests=None)  -> (acc [P, R], preds [P][R] or None)
    fit_predict(X, y, problems, Cs, tests) -> [predictions per problem]

The objective is scikit-learn's LogisticRegression's: C * sum(log-loss over the problem's rows) + |w|^2 / 2, with an
unpenalised intercept; predictions are the class whose side of the boundary a row lies on (ties: the first
class), as `LogisticRegression.predict`. Every problem is a 0/1 membership row over the shared matrix, so one
matrix product evaluates all problems at once (scan: all folds of a task, one C at a time, warm-started from the
previous C's solutions, ascending). Each iteration is a Newton step whose Hessian is shared: the Hessian
averaged over the problems (exact for their mean, and within the sampling noise of overlapping folds for each of
them), factorised once and refreshed only when progress slows, with a backtracking line search per problem, so
every problem converges however rough the shared Hessian is. The stopping rule is scikit-learn's (the largest
gradient entry of the objective divided by C times the number of rows), at a tolerance far below its default:
the solutions are the exact optima that scikit-learn's solvers approach.
"""
from __future__ import annotations

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.special import expit

TOL = 1e-10  # scikit-learn's default is 1e-4; the optimum is unique, so a tighter stop only removes solver noise
MAX_ITER = 500
MIN_PROBLEMS = 2
CG_RTOL, CG_MAX = 1e-2, 50  # inexact Newton: each step solved to 1% of the gradient's norm


def _objective(Z, W, y01, members, C):
    loss = np.logaddexp(0.0, Z) - y01[:, None] * Z  # (n, P): log-loss of each row under each problem
    return C * np.einsum("np,pn->p", loss, members) + 0.5 * np.einsum("pd,pd->p", W[:, :-1], W[:, :-1])


def solve(Xa: np.ndarray, y01: np.ndarray, members: np.ndarray, C: float, W0: np.ndarray | None = None,
          tol: float = TOL, max_iter: int = MAX_ITER) -> np.ndarray:
    """Xa (n, d+1) float64 with a last column of ones; y01 (n,) in {0, 1}; members (P, n) 0/1 rows. Returns W
    (P, d+1): weights and intercept of each problem's optimum."""
    P, D = members.shape[0], Xa.shape[1]
    W = np.zeros((P, D)) if W0 is None else np.array(W0, dtype=np.float64)
    pen = np.ones(D)
    pen[-1] = 0.0  # the intercept is not penalised
    scale = C * members.sum(1)  # scikit-learn's gradient scale: C x rows
    factor = None
    Z = Xa @ W.T
    for _ in range(max_iter):
        S = expit(Z)
        G = C * ((S - y01[:, None]).T * members) @ Xa + W * pen  # (P, D)
        todo = np.abs(G).max(1) / scale > tol
        if not todo.any():
            return W
        curvature = C * S * (1 - S) * members.T  # (n, P): each problem's Hessian row weights
        if factor is None:  # the preconditioner: the Hessian averaged over the open problems, once per solve
            factor = cho_factor(Xa.T @ (Xa * curvature[:, todo].mean(1)[:, None]) + np.diag(pen))
        step = _newton_step(Xa, curvature, pen, G, todo, factor)
        XS = Xa @ step.T
        f0 = _objective(Z, W, y01, members, C)
        slope = np.einsum("pd,pd->p", G, step)
        t = np.ones(P)
        for _ in range(40):  # backtracking (Armijo); rounding slack for steps that only polish the last digits
            ft = _objective(Z + XS * t, W + step * t[:, None], y01, members, C)
            ok = ft <= f0 + 1e-4 * t * slope + 1e-13 * np.abs(f0)
            if ok.all():
                break
            t[~ok] *= 0.5
        W = W + step * t[:, None]
        Z = Xa @ W.T
    return W


def _newton_step(Xa, curvature, pen, G, todo, factor, rtol=CG_RTOL, max_cg=CG_MAX):
    """Each open problem's Newton step H_p x = -G_p by conjugate gradients preconditioned with the shared
    Hessian; Hessian-vector products of all problems are two matrix products."""
    x = np.zeros_like(G)
    r = np.where(todo[:, None], -G, 0.0)
    z = cho_solve(factor, r.T).T
    p = z.copy()
    rz = np.einsum("pd,pd->p", r, z)
    target = rtol * np.linalg.norm(r, axis=1)
    for _ in range(max_cg):
        live = np.linalg.norm(r, axis=1) > target
        if not live.any():
            break
        Hp = ((Xa @ p.T) * curvature).T @ Xa + p * pen
        pHp = np.einsum("pd,pd->p", p, Hp)
        alpha = np.where(live, rz / np.where(live, pHp, 1.0), 0.0)
        x += alpha[:, None] * p
        r -= alpha[:, None] * Hp
        z = cho_solve(factor, r.T).T
        rz_new = np.einsum("pd,pd->p", r, z)
        beta = np.where(live, rz_new / np.where(rz > 0, rz, 1.0), 0.0)
        p = z + beta[:, None] * p
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
    return classes[(Xa_rows @ W.T > 0).astype(int)]


def scan(X, y, problems, Cs, tests=None):
    X, y = np.asarray(X), np.asarray(y)
    classes = np.unique(y)
    mean = X.mean(axis=0, dtype=np.float64)
    Xa, y01 = _augment(X, mean), (y == classes[1]).astype(np.float64)
    members = _members(problems, len(y))
    acc = np.zeros((len(problems), len(Cs)))
    preds = [[None] * len(Cs) for _ in problems] if tests is not None else None
    Ta = None if tests is None else [_augment(T, mean) for T in tests]
    W = None
    for C in sorted(Cs):  # ascending C: each solution is a good start for the next
        W = solve(Xa, y01, members, C, W)
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
    Xa, y01 = _augment(X, mean), (y == classes[1]).astype(np.float64)
    out = [None] * len(problems)
    W = None
    for C in sorted(set(Cs)):  # one shared Hessian per C; ascending, each group starts from the last solution
        group = [p for p, c in enumerate(Cs) if c == C]
        start = None if W is None else np.repeat(W.mean(0, keepdims=True), len(group), axis=0)
        W = solve(Xa, y01, _members([problems[p] for p in group], len(y)), C, start)
        for w, p in zip(W, group):
            out[p] = _predict(_augment(tests[p], mean), w, classes)
    return out


def applicable(y, problems) -> bool:
    """Two classes overall and in every problem's training rows, and enough problems to share the work (one
    problem alone, e.g. SST-2's dev split, is solved faster by scikit-learn's own Newton solver)."""
    y = np.asarray(y)
    return len(problems) >= MIN_PROBLEMS and len(np.unique(y)) == 2 and \
        all(len(np.unique(y[tr])) == 2 for tr, _ in problems)


__all__ = ["solve", "scan", "fit_predict", "applicable", "TOL"]
