"""Transfer probes: SentEval's folds, both classifier back-ends, the three protocols, the readers' order."""
from pathlib import Path

import numpy as np
import pytest

from mixcse.evaluation.classifiers import (SklearnLR, TorchLR, dev_split, inner_kfold, kfold_then_test,
                                           make_classifier, stratified_folds)
from mixcse.evaluation.data import load_binary, load_mrpc, load_sst2, load_trec

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
    scores = clf.scan(X[:40], y[:40], X[40:], y[40:], clf.grid_inner)
    assert len(scores) == len(clf.grid_inner) and min(scores) == 1.0
    assert (clf.fit_predict(X, y, Xt, clf.grid_kfold[0]) == yt).all()
    res = inner_kfold(X, y, clf, k=3)
    assert res["acc"] == 100.0 and len(res["fold_acc"]) == 3
    res, yhat = kfold_then_test(X, y, Xt, yt, clf, k=3)
    assert res["acc"] == 100.0 and res["chosen_reg"] in clf.grid_kfold
    res = dev_split(X[:40], y[:40], X[40:], y[40:], Xt, yt, clf)
    assert res["acc"] == 100.0


def test_torch_probe_multiclass_and_deterministic():
    X, y = blobs(90, classes=3, seed=3)
    a = TorchLR(fast=True).scan(X[:60], y[:60], X[60:], y[60:], [1e-5, 1e-2])
    b = TorchLR(fast=True).scan(X[:60], y[:60], X[60:], y[60:], [1e-5, 1e-2])
    assert a == b and min(a) == 1.0


def test_grids_follow_senteval():
    assert SklearnLR().grid_inner == [0.25, 0.5, 1, 2, 4, 8]
    assert SklearnLR().grid_kfold == [0.5, 1, 2, 4, 8, 16, 32]
    assert TorchLR().grid_inner == pytest.approx([1e-5, 1e-4, 1e-3, 1e-2])
    assert len(SklearnLR(fast=True).grid_inner) < 6
    assert TorchLR().optim == "adam" and TorchLR(fast=True).optim == "rmsprop"
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
