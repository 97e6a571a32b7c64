"""The default probe is SentEval's PyTorch protocol: the batched `TorchLR` against a plain one-probe-at-a-time
reimplementation of SentEval's classifier (tests/senteval_reference.py), and SentEval's constants pinned."""
import numpy as np
import pytest
import senteval_reference as ref

from mixcse.evaluation.probes import (
    DEFAULT_CLASSIFIER,
    TorchLR,
    dev_split,
    inner_kfold,
    kfold_then_test,
    make_classifier,
    single_threaded,
    stratified_folds,
)
from mixcse.evaluation.runner import KFOLD

pytestmark = pytest.mark.numeric  # rerun on other arithmetic paths (docs/development.md)


def clusters(n=260, dim=32, classes=3, seed=0, spread=3.0, scale=0.05):
    """Overlapping Gaussian clusters of small norm: weight decay matters against gradients this small, so the
    probes of the L2 grid end apart (the k-fold scan picks 1e-3, an inner fold and fasttest's split 1e-2)."""
    rng = np.random.RandomState(seed)
    y = rng.permutation(np.arange(n) % classes)
    centres = rng.randn(classes, dim)
    X = (centres[y] + spread * rng.randn(n, dim)) * scale
    return X.astype(np.float32), y.astype(np.int64)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with single_threaded():  # tiny problems: a second thread only adds hand-off time, ~5x on a busy machine
        yield


@pytest.fixture(scope="module")
def data():
    X, y = clusters()
    return X[:180], y[:180], X[180:], y[180:]


@pytest.fixture(scope="module")
def kfold_expected(data):
    return ref.kfold(*data, k=10)


def test_default_classifier_is_sentevals_pytorch_probe():
    assert DEFAULT_CLASSIFIER == "senteval-pytorch"
    assert isinstance(make_classifier(), TorchLR) and isinstance(make_classifier("torch"), TorchLR)
    assert make_classifier("senteval", "fasttest").optim == "rmsprop"


@pytest.mark.parametrize("mode", ["test", "fasttest"])
def test_constants_are_senteval_and_simcse(mode):
    clf = make_classifier("senteval-pytorch", mode)
    cfg = ref.MODES[mode]
    assert (clf.optim, clf.batch_size, clf.tenacity, clf.epoch_size) == \
        (cfg["optim"], cfg["batch_size"], cfg["tenacity"], cfg["epoch_size"])
    assert KFOLD[mode] == cfg["kfold"]
    assert clf.grid_inner == clf.grid_kfold == pytest.approx(ref.L2_GRID, rel=1e-12)
    assert clf.max_epoch == ref.MAX_EPOCH and clf.validation_split == ref.VALIDATION_SPLIT and clf.seed == ref.SEED
    assert clf.settings()["lr"] == (1e-3 if mode == "test" else 1e-2)  # torch's Adam / RMSprop defaults


def test_folds_are_stratified_kfold_seed_1111_in_data_order():
    y = np.array([0, 1, 2, 0, 1, 0, 2, 1, 0, 1, 0, 2, 0, 1, 1, 0, 2, 0, 1, 2])
    tests = [te.tolist() for _, te in stratified_folds(y, 5)]
    # scikit-learn's StratifiedKFold(5, shuffle=True, random_state=1111) on this order: a change of the seed, of
    # shuffling, of the data order or of scikit-learn's splitting changes these
    assert tests == [[5, 6, 7, 12], [1, 2, 3, 8], [9, 15, 16, 17], [0, 11, 13, 14], [4, 10, 18, 19]]
    for (tr, te), (rtr, rte) in zip(stratified_folds(y, 5), ref._folds(y, 5)):
        assert tr.tolist() == rtr.tolist() and te.tolist() == rte.tolist()


def test_kfold_protocol_matches_senteval_probe_by_probe(data, kfold_expected):
    Xtr, ytr, Xte, yte = data
    expected, expected_yhat = kfold_expected
    assert expected["chosen_reg"] != ref.L2_GRID[0]  # the fixture discriminates between L2 strengths
    got, yhat = kfold_then_test(Xtr, ytr, Xte, yte, make_classifier("senteval-pytorch"), k=10)
    assert got["chosen_reg"] == pytest.approx(expected["chosen_reg"], rel=1e-12)
    assert (got["acc"], got["devacc"]) == (expected["acc"], expected["devacc"])
    assert np.array_equal(yhat, expected_yhat)


def test_inner_kfold_protocol_matches_senteval_probe_by_probe(data):
    Xtr, ytr, _, _ = data
    X, y = Xtr[:120], ytr[:120]
    expected = ref.inner_kfold(X, y, k=3)
    assert len(set(expected["chosen_reg"])) > 1
    got = inner_kfold(X, y, make_classifier("senteval-pytorch"), k=3)
    assert got["chosen_reg"] == pytest.approx(expected["chosen_reg"], rel=1e-12)
    assert got["fold_acc"] == expected["fold_acc"]
    assert (got["acc"], got["devacc"]) == (expected["acc"], expected["devacc"])


@pytest.mark.parametrize("mode", ["test", "fasttest"])
def test_dev_split_protocol_matches_senteval_probe_by_probe(data, mode):
    Xtr, ytr, Xte, yte = data
    expected = ref.split(Xtr[:120], ytr[:120], Xtr[120:], ytr[120:], Xte, yte, mode=mode)
    got = dev_split(Xtr[:120], ytr[:120], Xtr[120:], ytr[120:], Xte, yte, make_classifier("senteval-pytorch", mode))
    assert got["chosen_reg"] == pytest.approx(expected["chosen_reg"], rel=1e-12)
    assert (got["acc"], got["devacc"]) == (expected["acc"], expected["devacc"])


@pytest.mark.parametrize("drift", [dict(tenacity=4), dict(epoch_size=3), dict(batch_size=32), dict(seed=1112),
                                   dict(validation_split=0.1), dict(optim="rmsprop")])
def test_the_comparison_catches_a_drift(data, kfold_expected, drift):
    """One setting off changes what the probes do, and the k-fold comparison sees it."""
    expected, expected_yhat = kfold_expected
    got, yhat = kfold_then_test(*data, TorchLR(**drift), k=10)
    assert (got["devacc"], got["acc"]) != (expected["devacc"], expected["acc"]) or \
        not np.array_equal(yhat, expected_yhat)
