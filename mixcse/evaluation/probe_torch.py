"""The fast engine of the SentEval PyTorch probe: `train(clf, X, y, problems, wd) -> (W, b, best_acc)`.

Trains len(problems) x wd.shape[1] linear probes at once, each exactly as SentEval's one-probe loop does (same
seed, initial weights, validation split, per-epoch permutations, mini-batch mean cross-entropy, L2 as weight
decay on every parameter, Adam or RMSprop with torch's defaults, early stopping every `epoch_size` epochs with
SentEval's never-reset patience count). `clf` is a `classifiers.TorchLR` (its settings and `_split`); the result
has the shapes of `TorchLR._train_batched`: W (P, R, classes, d), b (P, R, classes), best validation accuracy
(P, R). Same computation as the reference loop up to float rounding; what makes it cheaper:
  * the bias is a weight column on a constant-1 feature, so one batched matmul and one optimiser update per step;
  * two classes: the softmax is the sigmoid of the logit difference and the two rows' data gradients are each
    other's negatives, so one matmul each way instead of two (the matmuls were most of the time);
  * otherwise logits are laid out (problem, regulariser, class, sample): the softmax runs along the batch, not
    over a short class axis, and the weight gradient is a plain batched matmul with no transposed copy;
  * the mini-batch rows of every problem are gathered into one preallocated buffer, the optimiser update is a
    handful of in-place kernels with per-problem bias corrections, and the rare steps where some problems have
    already finished their epoch update only those problems (instead of masking every tensor on every step);
  * early-stopping bookkeeping is vectorised over all probes.
"""
from __future__ import annotations

import numpy as np

BETA1, BETA2, RMS_ALPHA, EPS = 0.9, 0.999, 0.99, 1e-8  # torch.optim.Adam / RMSprop defaults
VALIDATION_CHUNK = 16  # problems scored together at a validation check (bounds the gathered rows' memory)


def _epoch_plan(orders: list[np.ndarray], B: int):
    """Row indices (A, S*B), per-row loss weights 1/batch size (0 on padding) and which problem has a batch at
    each of the S steps (A, S)."""
    n = np.asarray([len(o) for o in orders])
    steps = -(-n // B)
    S = max(int(steps.max()), 1)
    idx = np.zeros((len(orders), S * B), dtype=np.int64)
    weight = np.zeros((len(orders), S * B), dtype=np.float32)
    for a, order in enumerate(orders):
        idx[a, :len(order)] = order
        pos = np.arange(len(order))
        batch_size = np.minimum(B, len(order) - (pos // B) * B)  # the last batch of an epoch is smaller
        weight[a, :len(order)] = 1.0 / batch_size
    return idx, weight, np.arange(S)[None, :] < steps[:, None]


def _validation_accuracy(W, Xa, yt, val_rows: list[np.ndarray], alive: np.ndarray, R: int, C: int) -> np.ndarray:
    """Validation accuracy (len(alive), R) of every live probe; W holds the live problems' weights in order."""
    import torch

    D = Xa.shape[1]
    n_val = np.asarray([len(v) for v in val_rows])
    accs = np.zeros((len(alive), R))
    for lo in range(0, len(alive), VALIDATION_CHUNK):
        part = alive[lo:lo + VALIDATION_CHUNK]
        width = max(int(n_val[part].max()), 1)
        rows = np.zeros((len(part), width), dtype=np.int64)
        mask = np.zeros((len(part), width), dtype=bool)
        for i, p in enumerate(part):
            rows[i, :n_val[p]] = val_rows[p]
            mask[i, :n_val[p]] = True
        rows_t = torch.from_numpy(rows)
        logits = torch.bmm(W[lo:lo + len(part)], Xa[rows_t.view(-1)].view(len(part), width, D).transpose(1, 2))
        pred = logits.view(len(part), R, C, width).argmax(2)  # first best class, as argmax over a row
        right = (pred == yt[rows_t].unsqueeze(1)) & torch.from_numpy(mask).unsqueeze(1)
        accs[lo:lo + len(part)] = right.sum(2).numpy() / np.maximum(n_val[part], 1)[:, None]
    return accs


def _early_stopping(accs, alive, W, best_W, best_acc, count, stopped, tenacity: int, C: int) -> None:
    """SentEval's early stopping for every live probe, in place: a better validation accuracy keeps the weights in
    best_W; a probe stops at the check after ``tenacity`` checks without one (the count is never reset)."""
    import torch

    live = ~stopped[alive]
    better = live & (accs > best_acc[alive])
    worse = live & ~better
    if better.any():
        a_idx, r_idx = np.nonzero(better)
        best_acc[alive[a_idx], r_idx] = accs[a_idx, r_idx]
        rows_rc = (r_idx[:, None] * C + np.arange(C)).reshape(-1)
        best_W[torch.from_numpy(np.repeat(alive[a_idx], C)), torch.from_numpy(rows_rc)] = \
            W[torch.from_numpy(np.repeat(a_idx, C)), torch.from_numpy(rows_rc)]
    sub = alive[np.nonzero(worse)[0]], np.nonzero(worse)[1]
    stopped[sub] |= count[sub] >= tenacity
    count[sub] += 1


def train(clf, X, y, problems, wd):
    import torch

    P, R = wd.shape
    X = np.ascontiguousarray(X, dtype=np.float32)
    n, d = X.shape
    Xa = torch.from_numpy(np.concatenate([X, np.ones((n, 1), np.float32)], axis=1))  # bias as a weight column
    y_np = np.asarray(y, dtype=np.int64)
    C, B, D = int(y_np.max()) + 1, clf.batch_size, d + 1
    RC = R * C
    onehot = torch.nn.functional.one_hot(torch.from_numpy(y_np), C).float()  # (n, C)
    yt = torch.from_numpy(y_np)
    rngs = [np.random.RandomState(clf.seed) for _ in range(P)]
    splits = [clf._split(tr, va, rng) for (tr, va), rng in zip(problems, rngs)]
    torch.manual_seed(clf.seed)
    init = torch.nn.Linear(d, C)  # the same seed, so the same initial weights for every probe
    W = torch.cat([init.weight.detach(), init.bias.detach()[:, None]], 1).repeat(P * R, 1).view(P, RC, D)
    best_W = W.clone()
    best_acc = np.full((P, R), -1.0)
    count = np.zeros((P, R), dtype=int)
    stopped = np.zeros((P, R), dtype=bool)
    wd_rows = torch.from_numpy(np.repeat(wd, C, axis=1)).view(P, RC, 1)  # one L2 strength per class row
    adam = clf.optim == "adam"
    lr = 1e-3 if adam else 1e-2
    m1 = torch.zeros_like(W) if adam else None  # Adam's first moment
    m2 = torch.zeros_like(W)  # Adam's second moment / RMSprop's square average
    steps = np.zeros(P, dtype=np.int64)
    alive = np.arange(P)  # problems with at least one probe still training
    buf = torch.empty(P * B, D)

    def step(Wa, m1a, m2a, wda, rows, w, oh, t):
        A = Wa.shape[0]
        xb = torch.index_select(Xa, 0, rows.reshape(-1), out=buf[:A * B]).view(A, B, D)
        if C == 2:  # softmax over two classes is the sigmoid of the logit difference: half the matmul work
            rows = Wa.view(A, R, 2, D)
            g = torch.bmm(rows[:, :, 1] - rows[:, :, 0], xb.transpose(1, 2)).sigmoid_()  # (problem, reg, sample)
            g.sub_(oh[:, 1].unsqueeze(1)).mul_(w.view(A, 1, B))  # d(mean cross-entropy)/d(class-1 logit)
            g1 = torch.bmm(g, xb)
            grad = torch.stack([g1.neg(), g1], dim=2).view(A, RC, D)
        else:
            g = torch.bmm(Wa, xb.transpose(1, 2)).view(A, R, C, B).softmax(dim=2)  # (problem, reg, class, sample)
            g.sub_(oh.unsqueeze(1)).mul_(w.view(A, 1, 1, B))  # d(mean cross-entropy)/d(logits)
            grad = torch.bmm(g.view(A, RC, B), xb)
        grad.addcmul_(Wa, wda)  # L2 as torch's weight_decay: grad += wd * param
        if adam:
            m1a.lerp_(grad, 1 - BETA1)
            m2a.mul_(BETA2).addcmul_(grad, grad, value=1 - BETA2)
            step_size = torch.from_numpy((lr / (1 - BETA1 ** t)).astype(np.float32)).view(A, 1, 1)
            bc2_sqrt = torch.from_numpy(np.sqrt(1 - BETA2 ** t).astype(np.float32)).view(A, 1, 1)
            denom = m2a.sqrt().div_(bc2_sqrt).add_(EPS)
            Wa.sub_(m1a.mul(step_size).div_(denom))
        else:
            m2a.mul_(RMS_ALPHA).addcmul_(grad, grad, value=1 - RMS_ALPHA)
            Wa.addcdiv_(grad, m2a.sqrt().add_(EPS), value=-lr)

    val_rows = [np.asarray(splits[p][1], dtype=np.int64) for p in range(P)]
    nepoch = 0
    while len(alive) and nepoch <= clf.max_epoch:
        for _ in range(clf.epoch_size):
            orders = [splits[p][0][rngs[p].permutation(len(splits[p][0]))] for p in alive]
            idx_np, weight_np, active = _epoch_plan(orders, B)
            idx, weight = torch.from_numpy(idx_np), torch.from_numpy(weight_np)
            oh_all = onehot[idx].transpose(1, 2)  # (A, C, S*B)
            for s in range(active.shape[1]):
                cols = slice(s * B, (s + 1) * B)
                act = active[:, s]
                if act.all():
                    steps[alive] += 1
                    step(W, m1, m2, wd_rows[torch.from_numpy(alive)], idx[:, cols],
                         weight[:, cols], oh_all[:, :, cols], steps[alive].astype(np.float64))
                    continue
                sub = np.flatnonzero(act)  # some problems finished their epoch: step only the others
                st = torch.from_numpy(sub)
                steps[alive[sub]] += 1
                Ws, m2s = W[st], m2[st]
                m1s = m1[st] if adam else None
                step(Ws, m1s, m2s, wd_rows[alive[sub]], idx[st, cols], weight[st, cols], oh_all[st][:, :, cols],
                     steps[alive[sub]].astype(np.float64))
                W[st], m2[st] = Ws, m2s
                if adam:
                    m1[st] = m1s
        nepoch += clf.epoch_size
        accs = _validation_accuracy(W, Xa, yt, val_rows, alive, R, C)
        _early_stopping(accs, alive, W, best_W, best_acc, count, stopped, clf.tenacity, C)
        keep = ~stopped[alive].all(axis=1)
        if not keep.all():
            k = torch.from_numpy(np.flatnonzero(keep))
            W, m2 = W[k], m2[k]
            m1 = m1[k] if adam else None
            alive = alive[keep]
    best = best_W.view(P, R, C, D)
    return best[..., :d].contiguous(), best[..., d].contiguous(), best_acc


__all__ = ["train"]
