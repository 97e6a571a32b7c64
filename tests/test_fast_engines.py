"""The fast paths of evaluation against their plain references, on real sentence embeddings.

Probes: all-MiniLM-L6-v2's embeddings of 300 CR and 239 TREC sentences (the first 192 of 384 dimensions, as
float16; tests/fixtures/minilm_transfer_embeddings.npz, taken from `mixcse eval`'s embedding cache), each
protocol run with the library's probes and with the reference engines of tests/probe_reference.py (and SentEval's
one-probe-at-a-time loop of tests/senteval_reference.py). Encoding: a tiny BERT, `encode_units` against `encode` one
list at a time.
"""
from pathlib import Path

import numpy as np
import pytest
import senteval_reference as ref
from probe_reference import reference_classifier
from sklearn.linear_model import LogisticRegression

from mixcse.evaluation import probe_newton
from mixcse.evaluation.probes import (
    TorchLR,
    dev_split,
    inner_kfold,
    kfold_then_test,
    make_classifier,
    single_threaded,
)

pytestmark = pytest.mark.numeric  # rerun on other arithmetic paths (docs/development.md)

FIXTURE = np.load(Path(__file__).parent / "fixtures" / "minilm_transfer_embeddings.npz")
CR = FIXTURE["cr_X"].astype(np.float32), FIXTURE["cr_y"].astype(np.int64)
TREC = tuple(FIXTURE[k].astype(np.float32 if "X" in k else np.int64) for k in ("trec_Xtr", "trec_ytr", "trec_Xte",
                                                                               "trec_yte"))


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with single_threaded():
        yield


def cr_split():
    """CR as train / dev / test thirds (dev_split's shape)."""
    X, y = CR
    return X[:150], y[:150], X[150:225], y[150:225], X[225:], y[225:]


def both(kind, mode, protocol, *args, **kw):
    out = []
    for clf in (make_classifier(kind, mode), reference_classifier(kind, mode)):
        res = protocol(*args, clf, **kw)
        out.append(res[0] if isinstance(res, tuple) else res)
    return out


@pytest.mark.parametrize("mode", ["test", "fasttest"])
def test_torch_fast_engine_equals_reference_inner_kfold(mode):
    fast, plain = both("senteval-pytorch", mode, inner_kfold, *CR, k=10 if mode == "test" else 5)
    assert fast == plain
    assert len(set(fast["chosen_reg"])) > 1  # the regularisers are told apart on these folds


def test_torch_fast_engine_equals_reference_multiclass_kfold_and_dev_split():
    fast, plain = both("senteval-pytorch", "test", kfold_then_test, *TREC, k=10)
    assert fast == plain
    fast, plain = both("senteval-pytorch", "test", dev_split, *cr_split())
    assert fast == plain


def test_torch_fast_engine_equals_sentevals_own_loop():
    """The fast engine against the plain one-probe-at-a-time SentEval reimplementation, not only against the
    library's reference engine."""
    Xtr, ytr, Xte, yte = TREC
    expected, expected_yhat = ref.kfold(Xtr, ytr, Xte, yte, k=5)
    got, yhat = kfold_then_test(Xtr, ytr, Xte, yte, TorchLR(), k=5)
    assert got["chosen_reg"] == pytest.approx(expected["chosen_reg"], rel=1e-12)
    assert (got["acc"], got["devacc"]) == (expected["acc"], expected["devacc"])
    assert np.array_equal(yhat, expected_yhat)
    expected = ref.split(*cr_split(), mode="fasttest")
    got = dev_split(*cr_split(), make_classifier("senteval-pytorch", "fasttest"))
    assert (got["chosen_reg"], got["acc"], got["devacc"]) == \
        (pytest.approx(expected["chosen_reg"], rel=1e-12), expected["acc"], expected["devacc"])


def test_sklearn_fast_engine_equals_reference():
    fast, plain = both("sklearn-converged", "test", inner_kfold, *CR, k=10)
    assert fast == plain
    Xtr, ytr, Xdv, ydv, Xte, yte = cr_split()
    fast, plain = both("sklearn-converged", "test", kfold_then_test, np.r_[Xtr, Xdv], np.r_[ytr, ydv], Xte, yte, k=10)
    assert fast == plain
    assert len({c for c in make_classifier("sklearn-converged").grid_kfold}) == 7


def test_batched_solver_reaches_each_problems_optimum():
    """Every problem's weights equal a cold scikit-learn fit solved far below its default tolerance."""
    X, y = CR
    rng = np.random.RandomState(0)
    problems = [(np.sort(rng.choice(len(y), 200, replace=False)), None) for _ in range(5)]
    mean = X.mean(0, dtype=np.float64)
    Xa = np.c_[np.float64(X) - mean, np.ones(len(X))]
    members = np.zeros((len(problems), len(y)))
    for p, (tr, _) in enumerate(problems):
        members[p, tr] = 1
    for C in (0.25, 8.0):
        W = probe_newton.solve(Xa, np.float64(y), members, C)
        for (tr, _), w in zip(problems, W):
            exact = LogisticRegression(C=C, solver="newton-cholesky", tol=1e-12, max_iter=1000).fit(
                np.float64(X[tr]) - mean, y[tr])
            assert np.abs(w[:-1] - exact.coef_[0]).max() < 1e-6 * max(1.0, np.abs(exact.coef_).max())
            assert w[-1] == pytest.approx(exact.intercept_[0], abs=1e-6)


def test_sklearn_fast_engine_leaves_multiclass_tasks_and_single_problems_to_scikit_learn():
    _, ytr, _, _ = TREC
    assert not probe_newton.applicable(ytr, [(np.arange(len(ytr)), None)] * 3)  # six classes: lbfgs
    assert probe_newton.applicable(ytr, [(np.arange(len(ytr)), None)] * 3, max_classes=6)
    assert not probe_newton.applicable(ytr, [(np.flatnonzero(ytr != 5), None)] * 3, max_classes=6)  # one missing
    X, y = CR
    assert not probe_newton.applicable(y, [(np.arange(len(y)), None)])  # one problem
    fast, plain = both("sklearn-converged", "test", kfold_then_test, *TREC, k=5)
    assert fast == plain


def test_batched_solver_reaches_the_multinomial_optimum():
    Xtr, ytr, _, _ = TREC
    X = np.float64(Xtr[:, :48])  # the exact multinomial Newton reference costs (6 x dim)^3 per step
    mean = X.mean(0)
    Xa = np.c_[X - mean, np.ones(len(X))]
    rows = [np.arange(len(ytr)) % 5 != f for f in range(5)]
    W = probe_newton.solve(Xa, ytr, np.float64(rows), 2.0, classes=6)
    for r, w in zip(rows, W):
        exact = LogisticRegression(C=2.0, solver="newton-cholesky", tol=1e-12, max_iter=1000).fit(X[r] - mean, ytr[r])
        assert np.abs(w[:, :-1] - exact.coef_).max() < 1e-6 * max(1.0, np.abs(exact.coef_).max())
        # intercepts: only their differences matter (adding one number to all of them changes nothing)
        assert np.abs(np.diff(w[:, -1]) - np.diff(exact.intercept_)).max() < 1e-6


# ------------------------------------------------------------------------------------------------ encoding
UNITS = {
    "a": ["the t0w1 t0w2 of t1w3", "t2w2 a t2w3", "t3w1 t3w2 t3w3 t3w4 t3w5 t3w6 in the t4w1", "to t5w5"],
    "b": ["t2w2 a t2w3", "the t0w1 t0w2 of t1w3 and t1w4 t1w5 t1w6", "t6w6", "t3w1 t3w2 t3w3 t3w4 t3w5 t3w6 in "
          "the t4w1", "a t7w1 t7w2", "of t0w0 t0w1"],
    "c": [f"t{i % 8}w{i % 12} " * (1 + i % 9) for i in range(37)],
}


@pytest.fixture(scope="module")
def encoder(tiny_bert):
    from mixcse.models.sentence_encoder import SentenceEncoder

    return SentenceEncoder.load(tiny_bert, pooler="avg", device="cpu")


def test_encode_units_gives_each_list_the_bits_of_its_own_encode(encoder):
    from mixcse.evaluation.embed import _shares_rows

    if not encoder.rows_are_independent(UNITS["c"], batch_size=8):
        # this CPU's kernels give a row other bits with other batch-mates: evaluation must not share rows
        assert not _shares_rows(encoder, UNITS["c"], 8)
        pytest.skip("rows depend on their batch-mates with this CPU's kernels; evaluation encodes task by task")
    for threads in (1, 2):
        got = encoder.encode_units(UNITS, batch_size=3, threads=threads)
        for name, sentences in UNITS.items():
            assert np.array_equal(got[name], encoder.encode(sentences, batch_size=3)), (name, threads)
    # the premise: the same sentence padded to another width gets other bits, so the widths are what is shared
    alone = encoder.encode(["t6w6"], batch_size=3)
    assert not np.array_equal(alone, encoder.encode_units(UNITS, batch_size=3)["b"][2:3])


def test_evaluation_encoding_fast_and_unit_by_unit_paths_agree(encoder, tmp_path, monkeypatch):
    from mixcse.evaluation import embed

    fast, stats = embed.embed_units(encoder, UNITS, batch_size=4)
    shared = encoder.rows_are_independent(UNITS["a"], batch_size=4)  # the first unit decides, on this CPU's kernels
    assert stats["computation"].startswith("each (sentence, padded width) once") == shared
    with monkeypatch.context() as m:
        m.setattr(embed, "_shares_rows", lambda *args: False)
        plain, plain_stats = embed.embed_units(encoder, UNITS, batch_size=4)
    assert plain_stats["computation"] == "task by task"
    for name in UNITS:
        assert fast[name].row == plain[name].row and np.array_equal(fast[name].matrix, plain[name].matrix)
    # a cache written by one path serves the other
    embed.embed_units(encoder, UNITS, batch_size=4, cache_dir=tmp_path)
    monkeypatch.setattr(embed, "_shares_rows", lambda *args: False)
    cached, cached_stats = embed.embed_units(encoder, UNITS, batch_size=4, cache_dir=tmp_path)
    assert cached_stats["encoded"] == 0 and all(np.array_equal(cached[n].matrix, plain[n].matrix) for n in UNITS)


def test_encoders_whose_rows_depend_on_their_batch_mates_are_encoded_unit_by_unit():
    from mixcse.evaluation.embed import embed_units

    class BatchMean:
        """Each row shifted by its batch's mean: rows are not independent."""
        device = type("Device", (), {"type": "cpu"})()

        def encode(self, sentences, batch_size=64):
            X = np.asarray([[len(s), s.count("w")] for s in sentences], dtype=np.float32)
            return X + X.mean(0)

        def rows_are_independent(self, sentences, batch_size=64):
            return False

        def encode_units(self, units, batch_size=64, show_progress=False):
            raise AssertionError("must not be used")

    got, stats = embed_units(BatchMean(), UNITS, batch_size=4)
    assert stats["computation"] == "task by task"
    assert np.array_equal(got["a"].matrix, BatchMean().encode(UNITS["a"]))
