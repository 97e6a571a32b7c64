"""The evaluators against the results the evaluation code gave before it was built on them (tests/fixtures/eval/
runner_golden.json, recorded with the runner and selectors of commit 178e90a), and the evaluator interface itself.

Recorded: ``evaluate`` on the fixture's 14 tasks + two pair files + a tiny BEIR folder with a deterministic hashed
encoder (both probes, fasttest) and with a tiny BERT (STS, analysis, pairs, retrieval); the three checkpoint
selectors and the held-out pair scores on both encoders (the tiny BERT's entries by
tests/fixtures/eval/record_tiny_golden.py, on a vocabulary covering the fixture's words).

Tolerances follow the arithmetic, so that the comparison holds on any CPU and any kernel path (docs/development.md):
the hashed encoder's embeddings are exact and its statistics float64, so they agree to float64 rounding (TIGHT);
the tiny BERT's embeddings are float32 and their last bits differ between kernels (FLOAT32)."""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import comparable_results as comparable
from conftest import make_tiny_bert, tiny_vocab, write_tiny_beir

from mixcse.evaluation import Evaluator, PairsEvaluator, STSEvaluator, evaluate
from mixcse.evaluation.selection import build_selector

pytestmark = pytest.mark.numeric  # rerun on other arithmetic paths (docs/development.md)

ROOT = Path(__file__).parent / "fixtures" / "eval"
DOWNSTREAM = ROOT / "downstream"
PAIRS = [ROOT / "pairs" / "binary.tsv", ROOT / "pairs" / "graded.tsv"]
GOLDEN = json.loads((ROOT / "runner_golden.json").read_text())
for _recorded in GOLDEN.values():  # a description naming the engine's module, not a number
    _recorded.get("settings", {}).get("classifier", {}).pop("two_class_folds", None)


class HashedEncoder:
    """Deterministic embeddings: each sentence's row is drawn from a generator seeded by its hash."""

    fingerprint = None

    def encode(self, sentences, batch_size=64):
        rows = []
        for s in sentences:
            seed = int.from_bytes(hashlib.sha256(s.encode("utf-8")).digest()[:4], "little")
            rows.append(np.random.RandomState(seed).randn(16))
        return np.asarray(rows, dtype=np.float32)


# (relative, absolute) tolerances; scores are on the x100 scale.
TIGHT = (1e-12, 1e-12)  # float64 statistics of identical embeddings: only the order of a sum differs
# float32 embeddings: rounding of ~1e-7 in each cosine, amplified by correlations over 6 to 14 pairs; the largest
# difference seen between kernel paths (AVX-512 / generic torch kernels, 2 threads / 1) is 5e-5 on the x100 scale
FLOAT32 = (1e-5, 2e-4)


def assert_same(got, want, path="", tol=TIGHT):
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), (path, sorted(set(got) ^ set(want)))
        for k in want:
            assert_same(got[k], want[k], f"{path}/{k}", tol)
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{path}[{i}]", tol)
    elif isinstance(want, float) and not isinstance(got, bool):
        assert math.isclose(got, want, rel_tol=tol[0], abs_tol=tol[1]), (path, got, want)
    else:
        assert got == want, (path, got, want)


@pytest.fixture(scope="module")
def beir(tmp_path_factory):
    return write_tiny_beir(tmp_path_factory.mktemp("beir") / "beir")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from mixcse.models.sentence_encoder import SentenceEncoder

    folder = make_tiny_bert(tmp_path_factory.mktemp("tiny"), vocab=tiny_vocab(), exact_init=True, seed=3)
    return SentenceEncoder.load(str(folder), pooler="avg", device="cpu")


@pytest.mark.parametrize("classifier", ["senteval-pytorch", "sklearn-converged"])
def test_evaluate_gives_the_recorded_results(classifier, beir):
    got = evaluate(HashedEncoder(), tasks="all,pairs,retrieval", data_dir=DOWNSTREAM, mode="fasttest",
                   classifier=classifier, verbose=False, pairs_data=PAIRS, retrieval_data=beir)
    assert_same(comparable(got), GOLDEN[f"hashed/{classifier}"])


def test_evaluate_on_a_tiny_bert_gives_the_recorded_results(tiny, beir):
    got = evaluate(tiny, tasks="sts,analysis,pairs,retrieval", data_dir=DOWNSTREAM, verbose=False, pairs_data=PAIRS,
                   retrieval_data=beir)
    assert_same(comparable(got), GOLDEN["tiny-bert/sts,analysis,pairs,retrieval"], tol=FLOAT32)


SELECTORS = {"stsb_dev": dict(select_on="stsb_dev", data_dir=str(DOWNSTREAM), select_data=None, analysis=True),
             "pairs": dict(select_on="pairs", data_dir=None, select_data=str(PAIRS[0])),
             "pairs-graded": dict(select_on="pairs", data_dir=None, select_data=str(PAIRS[1]))}


@pytest.mark.parametrize("which", ["stsb_dev", "pairs", "pairs-graded", "retrieval"])
def test_selectors_give_the_recorded_scores(which, beir, tiny):
    kwargs = SELECTORS.get(which) or dict(select_on="retrieval", data_dir=None, select_data=str(beir))
    selector, note = build_selector(select_split="train", **kwargs)
    assert note is None and isinstance(selector, Evaluator)
    for label, encoder, tol in (("hashed", HashedEncoder(), TIGHT), ("tiny-bert", tiny, FLOAT32)):
        want = GOLDEN["selection"][f"{label}/{which}"]
        results = selector(encoder, batch_size=128)
        extras = {k: v for k, v in selector.extras(results).items() if k != "select_seconds"}
        assert selector.name == want["name"]
        assert_same({"score": selector.primary(results), "extras": extras},
                    {"score": want["score"], "extras": want["extras"]}, which, tol)


def test_held_out_pairs_give_the_recorded_scores(tiny):
    results = PairsEvaluator(PAIRS)(tiny, batch_size=128)
    got = {name: {"metric": r["main"], "value": r[r["main"]], "file": Path(r["file"]).name}
           for name, r in results.items()}
    assert_same(got, GOLDEN["held_out"], tol=FLOAT32)


def test_an_evaluator_reads_its_data_when_built_and_embeds_each_sentence_once():
    calls = []

    class Counting(HashedEncoder):
        def encode(self, sentences, batch_size=64):
            calls.append(list(sentences))
            return super().encode(sentences, batch_size)

    evaluator = STSEvaluator.stsb_dev(DOWNSTREAM)
    assert (evaluator.name, evaluator.primary_metric, evaluator.greater_is_better) == ("stsb_dev", "spearman", True)
    results = evaluator(Counting())
    sentences = evaluator.data.a + evaluator.data.b
    assert len(calls) == 1 and sorted(calls[0]) == sorted(set(sentences))
    assert evaluator.primary(results) == results["spearman"]
    with pytest.raises(Exception, match="sts-dev.csv"):
        STSEvaluator.stsb_dev(ROOT)  # no SentEval folder there: fails at construction, before any encoding


def _leaves(tree, path=""):
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _leaves(v, f"{path}/{k}")
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from _leaves(v, f"{path}[{i}]")
    elif isinstance(tree, float):
        yield path, tree


def _replaced(tree, path, value, here=""):
    if isinstance(tree, dict):
        return {k: _replaced(v, path, value, f"{here}/{k}") for k, v in tree.items()}
    if isinstance(tree, list):
        return [_replaced(v, path, value, f"{here}[{i}]") for i, v in enumerate(tree)]
    return value if here == path else tree


@pytest.mark.parametrize("entry, tol", [("hashed/senteval-pytorch", TIGHT), ("hashed/sklearn-converged", TIGHT),
                                        ("tiny-bert/sts,analysis,pairs,retrieval", FLOAT32),
                                        ("selection", FLOAT32), ("held_out", FLOAT32)])
def test_a_recorded_value_off_by_a_thousandth_fails_the_comparison(entry, tol):
    """The tolerances are tight: every recorded score of magnitude >= 0.5 (x100 scale), moved by 1e-3 of itself,
    fails the comparison the golden tests make (the hashed entries' at any magnitude)."""
    recorded, checked = GOLDEN[entry], 0
    assert_same(recorded, recorded, entry, tol)
    for path, value in _leaves(recorded):
        if abs(value) < (0.5 if tol is FLOAT32 else 1e-9):
            continue
        with pytest.raises(AssertionError):
            assert_same(_replaced(recorded, path, value * (1 + 1e-3)), recorded, entry, tol)
        checked += 1
    assert checked


def test_the_tiny_berts_fixture_cosines_have_no_near_ties(tiny):
    """Rank statistics are stable only if no two cosines are within rounding of each other: on every STS, STS-B,
    SICK and pair file of the fixture, the tiny BERT's sorted cosines are at least 1e-4 apart (float32 rounding of a
    cosine is ~1e-7; the model's seed was chosen for this)."""
    from mixcse.evaluation import senteval
    from mixcse.evaluation.pairs import read_pairs

    files = sorted((DOWNSTREAM / "STS").glob("STS1*-en-test/STS.input.*.txt"))
    assert len(files) == 24
    sets = [[line.split("\t")[:2] for line in f.read_text().splitlines()] for f in files]
    labelled = [*map(read_pairs, PAIRS), senteval.load_stsb(DOWNSTREAM, "dev"), senteval.load_stsb(DOWNSTREAM, "test"),
                senteval.load_sick(DOWNSTREAM)]
    sets += [list(zip(p.a, p.b)) for p in labelled]
    for pairs in sets:
        a = tiny.encode([s for s, _ in pairs])
        b = tiny.encode([s for _, s in pairs])
        cos = np.sort((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1))
        assert np.diff(cos).min() > 1e-4, pairs
