"""The plain batched loop of SentEval's PyTorch probe, which the fast engine (mixcse/evaluation/probe_torch.py) is
tested against: ``train_reference(clf, X, y, problems, wd)`` returns what ``probe_torch.train`` returns --
(W (P, R, classes, d), b (P, R, classes), best validation accuracy (P, R)) -- with every probe's Adam / RMSprop
update and early stopping written out step by step. ``clf`` is a ``mixcse.evaluation.probes.TorchLR``."""
from __future__ import annotations

import numpy as np
import torch


@torch.no_grad()
def train_reference(self, X, y, problems, wd):
    wd = np.asarray(wd, dtype=np.float32)
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
    val_idx, val_mask, n_val = _padded([splits[p][1] for p in range(P)])
    lr = 1e-3 if self.optim == "adam" else 1e-2
    beta1, beta2, alpha, eps = 0.9, 0.999, 0.99, 1e-8
    nepoch = 0
    while len(alive) and nepoch <= self.max_epoch:
        alive_t = torch.from_numpy(alive)
        for _ in range(self.epoch_size):
            order = [splits[p][0][rngs[p].permutation(len(splits[p][0]))] for p in alive]
            idx_all, mask_all, _ = _padded(order, multiple=B)
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


def _padded(rows, multiple: int = 1):
    n = np.asarray([len(r) for r in rows], dtype=np.int64)
    width = max(int(n.max()) if len(n) else 0, 1)
    width = -(-width // multiple) * multiple
    idx = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=bool)
    for i, r in enumerate(rows):
        idx[i, :len(r)] = r
        mask[i, :len(r)] = True
    return torch.from_numpy(idx), torch.from_numpy(mask), n


# The reference engines, as probes: the plain loops the library's fast engines are pinned to.
from mixcse.evaluation.probes import SklearnLR, TorchLR, classifier_name, single_threaded  # noqa: E402


class ReferenceTorchLR(TorchLR):
    """SentEval's PyTorch probe trained by ``train_reference`` instead of ``probe_torch.train``."""

    def _train(self, X, y, problems, wd):
        with single_threaded():
            return train_reference(self, X, y, problems, wd)


class ReferenceSklearnLR(SklearnLR):
    """The sklearn-converged probe fitting one scikit-learn model at a time, two-class tasks too."""

    def _batched(self, y, problems) -> bool:
        return False


def reference_classifier(kind: str = "senteval-pytorch", mode: str = "test"):
    cls = {"senteval-pytorch": ReferenceTorchLR, "sklearn-converged": ReferenceSklearnLR}[classifier_name(kind)]
    return cls(fasttest=mode == "fasttest")
