"""Transfer probes: SentEval's folds, both classifier back-ends, the three protocols, the readers' order."""
from pathlib import Path

import numpy as np
import pytest

from mixcse.evaluation.probes import (
    SklearnLR,
    TorchLR,
    dev_split,
    inner_kfold,
    kfold_then_test,
    make_classifier,
    stratified_folds,
)
from mixcse.evaluation.senteval import load_binary, load_mrpc, load_sst2, load_trec

FIXTURE = Path(__file__).parent / "fixtures" / "eval" / "downstream"


def test_folds_are_stratified_partition_and_deterministic():
    y = np.array([0] * 30 + [1] * 20 + [2] * 10)
    folds = stratified_folds(y, 10, seed=1111)
    assert len(folds) == 10
    tests = np.concatenate([te for _, te in folds])
    assert sorted(tests.tolist()) == list(range(len(y)))  # each sample tested exactly once
    for tr, te in folds:
        assert np.bincount(y[te], minlength=3).tolist() == [3, 2, 1]  # class proportions kept
        assert set(tr).isdisjoint(te) and len(tr) + len(te) == len(y)
    again = stratified_folds(y, 10, seed=1111)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(folds, again))
    other = stratified_folds(y, 10, seed=7)
    assert not all(np.array_equal(a[1], b[1]) for a, b in zip(folds, other))
    assert folds[0][1].tolist() != [0, 1, 2, 30, 31, 50]  # shuffled (unshuffled would take each class's first)


def blobs(n=40, dim=6, seed=0, classes=2):
    rng = np.random.RandomState(seed)
    y = np.arange(n) % classes
    centres = rng.randn(classes, dim) * 6
    X = (centres[y] + rng.randn(n, dim) * 0.3).astype(np.float32)
    return X, y


@pytest.mark.parametrize("kind", ["sklearn", "torch"])
def test_classifiers_solve_separable_problem(kind):
    clf = make_classifier(kind, "fasttest")
    X, y = blobs(60)
    Xt, yt = blobs(20, seed=0)
    problems = [(np.arange(40), np.arange(40, 60)), (np.arange(20, 60), np.arange(20))]
    acc, preds = clf.scan(X, y, problems, clf.grid_inner, tests=[Xt, Xt])
    assert acc.shape == (2, len(clf.grid_inner)) and acc.min() == 1.0
    assert all((p == yt).all() for row in preds for p in row)
    out = clf.fit_predict(X, y, [(np.arange(60), None)], [clf.grid_kfold[0]], [Xt])
    assert (out[0] == yt).all()
    res = inner_kfold(X, y, clf, k=3)
    assert res["acc"] == 100.0 and len(res["fold_acc"]) == 3
    res, yhat = kfold_then_test(X, y, Xt, yt, clf, k=3)
    assert res["acc"] == 100.0 and res["chosen_reg"] in clf.grid_kfold
    res = dev_split(X[:40], y[:40], X[40:], y[40:], Xt, yt, clf)
    assert res["acc"] == 100.0


def test_torch_probe_multiclass_deterministic_and_batched_like_one_by_one():
    X, y = blobs(90, classes=3, seed=3)
    X = X + np.random.RandomState(0).randn(*X.shape).astype(np.float32) * 3  # not trivially separable
    problems = [(np.arange(60), np.arange(60, 90)), (np.arange(30, 90), np.arange(30))]
    a, _ = TorchLR().scan(X, y, problems, [1e-5, 1e-2])
    b, _ = TorchLR().scan(X, y, problems, [1e-5, 1e-2])
    assert np.array_equal(a, b) and a.min() > 0.5
    # training every (problem, regulariser) alone gives the same probes as training them as one batch
    for p, prob in enumerate(problems):
        for r, reg in enumerate([1e-5, 1e-2]):
            alone, _ = TorchLR().scan(X, y, [prob], [reg])
            assert alone[0, 0] == pytest.approx(a[p, r])


def test_torch_probe_matches_a_plain_torch_reference():
    """The batched, hand-written Adam step equals torch.nn.Linear + CrossEntropyLoss + torch.optim.Adam."""
    import torch

    X, y = blobs(50, classes=3, seed=5)
    X = X + np.random.RandomState(1).randn(*X.shape).astype(np.float32) * 4
    tr, va = np.arange(35), np.arange(35, 50)
    clf = TorchLR(max_epoch=8)
    W, b, acc = clf._train(X, y, [(tr, va)], np.array([[1e-3]]))
    # reference: SentEval's loop written plainly, one probe
    rng = np.random.RandomState(1111)
    torch.manual_seed(1111)
    model = torch.nn.Linear(X.shape[1], 3)
    opt = torch.optim.Adam(model.parameters(), weight_decay=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y.astype(np.int64))
    best, best_state, count, nepoch, stop = -1.0, None, 0, 0, False
    while not stop and nepoch <= clf.max_epoch:
        for _ in range(clf.epoch_size):
            perm = rng.permutation(len(tr))
            for i in range(0, len(tr), clf.batch_size):
                idx = torch.from_numpy(tr[perm[i:i + clf.batch_size]])
                loss = loss_fn(model(Xt[idx]), yt[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
        nepoch += clf.epoch_size
        with torch.no_grad():
            accuracy = (model(Xt[va]).argmax(1) == yt[va]).float().mean().item()
        if accuracy > best:
            best, best_state = accuracy, (model.weight.detach().clone(), model.bias.detach().clone())
        elif count >= clf.tenacity:
            stop = True
        else:
            count += 1
    assert acc[0, 0] == pytest.approx(best)
    assert torch.allclose(W[0, 0], best_state[0], atol=1e-5) and torch.allclose(b[0, 0], best_state[1], atol=1e-5)


def test_grids_follow_senteval():
    assert SklearnLR().grid_inner == [0.25, 0.5, 1, 2, 4, 8]
    assert SklearnLR().grid_kfold == [0.5, 1, 2, 4, 8, 16, 32]
    assert TorchLR().grid_inner == pytest.approx([1e-5, 1e-4, 1e-3, 1e-2])
    assert len(SklearnLR(fasttest=True).grid_inner) < 6
    assert TorchLR().optim == "adam" and TorchLR(fasttest=True).optim == "rmsprop"
    with pytest.raises(ValueError):
        make_classifier("svm")


def test_binary_reader_keeps_empty_lines_and_sorts_like_senteval():
    cr = load_binary(FIXTURE, "CR")
    assert len(cr.sentences) == 60 and cr.sentences.count("") == 2  # empty lines kept, sorted first
    lengths = [len(s.split()) for s in cr.sentences]
    keys = list(zip(lengths, cr.labels.tolist()))
    assert keys == sorted(keys)  # SentEval's (length, label) order, which fixes the CV folds
    assert cr.labels.sum() == 30


def test_trec_mrpc_sst_readers():
    trec = load_trec(FIXTURE)
    assert len(trec["train"].sentences) == 60 and len(trec["test"].sentences) == 24
    assert "Who owns the caf\xe9 on the corner ?" in trec["train"].sentences  # latin-1, fine label dropped
    assert sorted(set(trec["train"].labels.tolist())) == list(range(6))
    mrpc = load_mrpc(FIXTURE)
    assert len(mrpc["train"]) == 40 and len(mrpc["test"]) == 20  # header (with BOM) dropped
    assert set(mrpc["train"].scores.tolist()) == {0, 1}
    sst = load_sst2(FIXTURE)
    assert [len(sst[s].sentences) for s in ("train", "dev", "test")] == [60, 20, 20]
