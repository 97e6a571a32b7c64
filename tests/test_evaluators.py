"""The evaluators against the results the evaluation code gave before it was built on them (tests/fixtures/eval/
runner_golden.json, recorded with the runner and selectors of commit 178e90a), and the evaluator interface itself.

Recorded: ``evaluate`` on the fixture's 14 tasks + two pair files + a tiny BEIR folder with a deterministic hashed
encoder (both probes, fasttest) and with a tiny BERT (STS, analysis, pairs, retrieval); the three checkpoint
selectors and the held-out pair scores on both encoders. Everything must come out the same: the hashed encoder's
numbers exactly, the tiny BERT's to float rounding (its embeddings' last bits may differ between CPUs)."""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import FILLER, TOPICS, make_tiny_bert, write_tiny_beir

from mixcse.evaluation import Evaluator, PairsEvaluator, STSEvaluator, evaluate
from mixcse.evaluation.selection import build_selector
from mixcse.utils.files import to_jsonable

ROOT = Path(__file__).parent / "fixtures" / "eval"
DOWNSTREAM = ROOT / "downstream"
PAIRS = [ROOT / "pairs" / "binary.tsv", ROOT / "pairs" / "graded.tsv"]
GOLDEN = json.loads((ROOT / "runner_golden.json").read_text())
for _recorded in GOLDEN.values():  # a description naming the engine's module, not a number
    _recorded.get("settings", {}).get("classifier", {}).pop("two_class_folds", None)
# descriptive settings that name modules, paths or timings rather than what was computed
VOLATILE = {"seconds", "cpu_seconds", "versions", "data_dir", "cache_dir", "encoding"}


class HashedEncoder:
    """Deterministic embeddings: each sentence's row is drawn from a generator seeded by its hash."""

    fingerprint = None

    def encode(self, sentences, batch_size=64):
        rows = []
        for s in sentences:
            seed = int.from_bytes(hashlib.sha256(s.encode("utf-8")).digest()[:4], "little")
            rows.append(np.random.RandomState(seed).randn(16))
        return np.asarray(rows, dtype=np.float32)


def comparable(results: dict) -> dict:
    results = to_jsonable(results)
    settings = results["settings"]
    for key in VOLATILE:
        settings.pop(key, None)
    settings["classifier"].pop("two_class_folds", None)
    if "retrieval" in settings:
        settings["retrieval"].pop("data_dir", None)
        settings["retrieval"].pop("metric_library", None)
    if "pairs" in settings:
        settings["pairs"]["files"] = [Path(f).name for f in settings["pairs"]["files"]]
    results.get("retrieval", {}).pop("seconds", None)
    for r in results.get("pairs", {}).values():
        r["file"] = Path(r["file"]).name
    return results


def assert_same(got, want, path="", rel=0.0):
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), (path, sorted(set(got) ^ set(want)))
        for k in want:
            assert_same(got[k], want[k], f"{path}/{k}", rel)
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{path}[{i}]", rel)
    elif isinstance(want, float) and not isinstance(got, bool):
        assert math.isclose(got, want, rel_tol=rel, abs_tol=rel * 100), (path, got, want)
    else:
        assert got == want, (path, got, want)


@pytest.fixture(scope="module")
def beir(tmp_path_factory):
    return write_tiny_beir(tmp_path_factory.mktemp("beir") / "beir")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from mixcse.models.sentence_encoder import SentenceEncoder

    folder = make_tiny_bert(tmp_path_factory.mktemp("tiny"), vocab=FILLER + [w for t in TOPICS for w in t])
    return SentenceEncoder.load(str(folder), pooler="avg", device="cpu")


@pytest.mark.parametrize("classifier", ["senteval-pytorch", "sklearn-converged"])
def test_evaluate_gives_the_recorded_results(classifier, beir):
    got = evaluate(HashedEncoder(), tasks="all,pairs,retrieval", data_dir=DOWNSTREAM, mode="fasttest",
                   classifier=classifier, verbose=False, pairs_data=PAIRS, retrieval_data=beir)
    assert_same(comparable(got), GOLDEN[f"hashed/{classifier}"])


def test_evaluate_on_a_tiny_bert_gives_the_recorded_results(tiny, beir):
    got = evaluate(tiny, tasks="sts,analysis,pairs,retrieval", data_dir=DOWNSTREAM, verbose=False, pairs_data=PAIRS,
                   retrieval_data=beir)
    assert_same(comparable(got), GOLDEN["tiny-bert/sts,analysis,pairs,retrieval"], rel=1e-4)


SELECTORS = {"stsb_dev": dict(select_on="stsb_dev", data_dir=str(DOWNSTREAM), select_data=None, analysis=True),
             "pairs": dict(select_on="pairs", data_dir=None, select_data=str(PAIRS[0])),
             "pairs-graded": dict(select_on="pairs", data_dir=None, select_data=str(PAIRS[1]))}


@pytest.mark.parametrize("which", ["stsb_dev", "pairs", "pairs-graded", "retrieval"])
def test_selectors_give_the_recorded_scores(which, beir, tiny):
    kwargs = SELECTORS.get(which) or dict(select_on="retrieval", data_dir=None, select_data=str(beir))
    selector, note = build_selector(select_split="train", **kwargs)
    assert note is None and isinstance(selector, Evaluator)
    for label, encoder, rel in (("hashed", HashedEncoder(), 0.0), ("tiny-bert", tiny, 1e-4)):
        want = GOLDEN["selection"][f"{label}/{which}"]
        results = selector(encoder, batch_size=128)
        extras = {k: v for k, v in selector.extras(results).items() if k != "select_seconds"}
        assert selector.name == want["name"]
        assert_same({"score": selector.primary(results), "extras": extras},
                    {"score": want["score"], "extras": want["extras"]}, which, rel)


def test_held_out_pairs_give_the_recorded_scores(tiny):
    results = PairsEvaluator(PAIRS)(tiny, batch_size=128)
    got = {name: {"metric": r["main"], "value": r[r["main"]], "file": Path(r["file"]).name}
           for name, r in results.items()}
    assert_same(got, GOLDEN["held_out"], rel=1e-4)


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
