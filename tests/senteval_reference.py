"""A plain, unbatched SentEval PyTorch logistic-regression probe and its three protocols, for tests.

`SentEvalLogReg(dim, ncls, l2reg, mode)` trains one probe exactly as SentEval's `MLP` with nhid=0 does;
`kfold(Xtr, ytr, Xte, yte, k, mode)`, `inner_kfold(X, y, k, mode)` and `split(Xtr, ytr, Xdev, ydev, Xte, yte,
mode)` run SentEval's KFoldClassifier, InnerKFoldClassifier and SplitClassifier with it, one probe at a time.
The constants are SentEval's and SimCSE's, written out here on purpose: the library's batched `TorchLR` is
checked against them, so they must not be imported from it.
"""
from __future__ import annotations

import numpy as np
import torch
from sklearn.model_selection import StratifiedKFold

SEED = 1111
L2_GRID = [1e-5, 1e-4, 1e-3, 1e-2]  # SentEval: [10**t for t in range(-5, -1)]
VALIDATION_SPLIT = 0.05
MAX_EPOCH = 200
# SimCSE's SentEval params: test mode and fasttest mode
MODES = {"test": dict(optim="adam", batch_size=64, tenacity=5, epoch_size=4, kfold=10),
         "fasttest": dict(optim="rmsprop", batch_size=128, tenacity=3, epoch_size=2, kfold=5)}


class SentEvalLogReg:
    """One probe. Seeds numpy and torch at construction (SentEval reseeds the global RNGs for every probe; a
    RandomState seeded alike draws the same numbers), then a Linear layer, mean cross-entropy, Adam or RMSprop with
    torch's defaults and the L2 strength as weight decay on every parameter."""

    def __init__(self, dim: int, ncls: int, l2reg: float, mode: str = "test", seed: int = SEED):
        cfg = MODES[mode]
        self.batch_size, self.tenacity, self.epoch_size = cfg["batch_size"], cfg["tenacity"], cfg["epoch_size"]
        self.rng = np.random.RandomState(seed)
        torch.manual_seed(seed)
        self.model = torch.nn.Linear(dim, ncls)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        optim = torch.optim.Adam if cfg["optim"] == "adam" else torch.optim.RMSprop  # RMSprop's default lr: 0.01
        self.optimizer = optim(self.model.parameters())
        self.optimizer.param_groups[0]["weight_decay"] = l2reg
        self.nepoch = 0

    def fit(self, X, y, validation_data=None) -> float:
        X, y = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y, dtype=torch.int64)
        if validation_data is None:  # the first draw of the probe's RNG splits off 5% for early stopping
            perm = self.rng.permutation(len(X))
            cut = int(VALIDATION_SPLIT * len(X))
            X, y, Xv, yv = X[perm[cut:]], y[perm[cut:]], X[perm[:cut]], y[perm[:cut]]
        else:
            Xv = torch.as_tensor(validation_data[0], dtype=torch.float32)
            yv = torch.as_tensor(validation_data[1], dtype=torch.int64)
        best, best_state, count, stop = -1.0, None, 0, False
        while not stop and self.nepoch <= MAX_EPOCH:
            for _ in range(self.epoch_size):
                perm = torch.from_numpy(self.rng.permutation(len(X)))
                for i in range(0, len(X), self.batch_size):
                    idx = perm[i:i + self.batch_size]
                    loss = self.loss_fn(self.model(X[idx]), y[idx])
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
            self.nepoch += self.epoch_size
            accuracy = self.score(Xv, yv)
            if accuracy > best:
                best = accuracy
                best_state = {k: v.clone() for k, v in self.model.state_dict().items()}
            else:  # the count of checks without improvement is never reset
                if count >= self.tenacity:
                    stop = True
                count += 1
        self.model.load_state_dict(best_state)
        return best

    @torch.no_grad()
    def predict(self, X) -> np.ndarray:
        return self.model(torch.as_tensor(X, dtype=torch.float32)).argmax(1).numpy()

    def score(self, X, y) -> float:
        return float((self.predict(X) == np.asarray(y)).mean())


def _folds(y, k):
    return list(StratifiedKFold(n_splits=k, shuffle=True, random_state=SEED).split(np.zeros((len(y), 1)), y))


def _probe(X, y, reg, mode):
    return SentEvalLogReg(X.shape[1], int(np.max(y)) + 1, reg, mode)


def _l2_scan(X_all, y_all, Xs, ys, k, mode):
    """Mean k-fold accuracy (x100, 2 decimals) of ``Xs, ys`` for each L2 value (each fold's test part is its
    early-stopping set), and the best L2; probes sized from ``X_all, y_all``."""
    scan = []
    for reg in L2_GRID:
        scores = []
        for tr, te in _folds(ys, k):
            clf = _probe(X_all, y_all, reg, mode)
            clf.fit(Xs[tr], ys[tr], validation_data=(Xs[te], ys[te]))
            scores.append(clf.score(Xs[te], ys[te]))
        scan.append(round(100 * float(np.mean(scores)), 2))
    return scan, L2_GRID[int(np.argmax(scan))]


def kfold(Xtr, ytr, Xte, yte, k, mode="test"):
    """TREC/MRPC: L2 by k-fold CV on train (each fold's test part is also its early-stopping set), refit on all
    of train with a 5% early-stopping split, score test."""
    scan, reg = _l2_scan(Xtr, ytr, Xtr, ytr, k, mode)
    clf = _probe(Xtr, ytr, reg, mode)
    clf.fit(Xtr, ytr)
    yhat = clf.predict(Xte)
    return {"acc": round(100 * float(np.mean(yhat == yte)), 2), "devacc": max(scan), "chosen_reg": reg,
            "scan": scan}, yhat


def inner_kfold(X, y, k, mode="test"):
    """MR/CR/SUBJ/MPQA: k outer folds; inside each training part, L2 by k-fold CV; refit with a 5% split."""
    dev, test, chosen = [], [], []
    for tr, te in _folds(y, k):
        Xo, yo = X[tr], y[tr]
        scan, reg = _l2_scan(X, y, Xo, yo, k, mode)
        chosen.append(reg)
        dev.append(max(scan))
        clf = _probe(X, y, reg, mode)
        clf.fit(Xo, yo)
        test.append(round(100 * clf.score(X[te], y[te]), 2))
    return {"acc": round(float(np.mean(test)), 2), "devacc": round(float(np.mean(dev)), 2), "fold_acc": test,
            "chosen_reg": chosen}


def split(Xtr, ytr, Xdev, ydev, Xte, yte, mode="test"):
    """SST-2: L2 picked on dev (early stopping on dev too), then that probe retrained and scored on test."""
    scan = []
    for reg in L2_GRID:
        clf = _probe(Xtr, ytr, reg, mode)
        clf.fit(Xtr, ytr, validation_data=(Xdev, ydev))
        scan.append(round(100 * clf.score(Xdev, ydev), 2))
    reg = L2_GRID[int(np.argmax(scan))]
    clf = _probe(Xtr, ytr, reg, mode)
    clf.fit(Xtr, ytr, validation_data=(Xdev, ydev))
    return {"acc": round(100 * clf.score(Xte, yte), 2), "devacc": max(scan), "chosen_reg": reg}
