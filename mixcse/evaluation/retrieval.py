"""Dense retrieval evaluation on a BEIR-layout folder, with MTEB's protocol and numbers.

Interface:

- ``load_beir(data_dir, split="test") -> BeirData``: ``corpus.jsonl`` (``_id``, ``title``, ``text``),
  ``queries.jsonl`` (``_id``, ``text``) and ``qrels/{split}.tsv`` (header ``query-id corpus-id score``). Only
  the queries judged in ``split`` are kept. Documents are encoded as ``(title + " " + text).strip()`` (the text
  alone when there is no title), as MTEB does. Malformed input raises ``DataError`` naming file and line.
- ``dev_subset(data, n_distractors=1000, seed=0) -> BeirData``: a fixed, seeded sub-corpus for cheap model
  selection: every document judged relevant for the split's queries plus a random sample of the rest.
- ``evaluate_retrieval(encoder, data, *, batch_size=64, max_seq_length=None, top_k=100, backend="auto",
  cache_dir=None) -> dict``: encode queries and documents, exact cosine top-k over the whole corpus, score.
- ``RetrievalEvaluator(data_dir, split, ...)``: the same as an evaluator (``mixcse eval --tasks retrieval``, and
  checkpoint selection on a seeded sub-corpus with ``subset=True``).
- ``score_retrieval(query_emb, doc_emb, data, *, top_k=100, backend="auto") -> dict``: the search and metrics
  alone, for callers that hold embeddings already (rows follow ``data.query_ids`` / ``data.doc_ids``).

Both return ``ndcg@10``, ``map@10``, ``mrr@10``, ``recall@100`` (x100, means over the judged queries; a
query whose relevant documents are not retrieved scores 0), ``n_queries``, ``n_documents``, ``seconds``.

Metrics come from ir-measures (``nDCG@10``, ``AP@10``, ``RR@10``, ``R@100``). It computes nDCG, AP and recall
with trec_eval through pytrec_eval, the code MTEB and BEIR call, and the cut-off reciprocal rank (which
pytrec_eval lacks, so MTEB hand-writes it) with the MS MARCO evaluation logic; it also averages over every
judged query, counting one without results as 0. Ties never depend on search order: trec_eval orders a run
by score, then document id.

Like MTEB, a document whose id equals the query id is kept (``ignore_identical_ids=False``, MTEB's default).
Search is ``mixcse.models.search.top_k_cosine``: faiss when installed, else numpy in blocks of queries and documents,
so memory stays at one block's score matrix plus the embeddings (1M x 384 float32 = 1.5 GB); documents are
encoded 50,000 per call for the same reason.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from mixcse.data.reader import iter_json_records
from mixcse.errors import DataError, MixCSEError
from mixcse.evaluation.embed import embed_units, encode_raw, encoder_fingerprint
from mixcse.evaluation.evaluator import Evaluator
from mixcse.models.search import top_k_cosine

METRIC_LIBRARY = "ir-measures"
METRICS = {"ndcg@10": "nDCG@10", "map@10": "AP@10", "mrr@10": "RR@10", "recall@100": "R@100"}
DEEPEST_CUTOFF = 100  # recall@100 needs the top 100
DEFAULT_DISTRACTORS = 1000
ENCODE_CHUNK = 50_000  # texts per encoder call (MTEB encodes the corpus in chunks of the same size)


@dataclass
class BeirData:
    """One split of a BEIR dataset: documents as encoded text, judged queries and their qrels."""

    doc_ids: list[str]
    documents: list[str]  # "title text", what the encoder sees
    query_ids: list[str]
    queries: list[str]
    qrels: dict[str, dict[str, int]]  # query id -> document id -> relevance
    split: str
    source: str = ""
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def n_documents(self) -> int:
        return len(self.doc_ids)

    @property
    def n_queries(self) -> int:
        return len(self.query_ids)


# ------------------------------------------------------------------------------------------------ loading
def _jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    if not path.is_file():
        raise DataError(f"{path}: file not found (a BEIR folder has corpus.jsonl, queries.jsonl, qrels/)")
    return iter_json_records(path, what="BEIR")


def _field(obj: dict, key: str, path: Path, lineno: int, *, required: bool = True) -> str:
    value = obj.get(key)
    if value is None and not required:
        return ""
    if value is None:
        raise DataError(f"{path}:{lineno}: missing {key!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and key == "_id":
        return str(value)
    if not isinstance(value, str):
        raise DataError(f"{path}:{lineno}: {key!r} must be a string, got {type(value).__name__}")
    return value


def _read_records(path: Path, *, with_title: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    for lineno, obj in _jsonl(path):
        rid = _field(obj, "_id", path, lineno)
        if rid in out:
            raise DataError(f"{path}:{lineno}: duplicate _id {rid!r}")
        text = _field(obj, "text", path, lineno)
        if with_title:
            title = _field(obj, "title", path, lineno, required=False)
            text = (title + " " + text).strip() if title else text.strip()
        out[rid] = text
    return out


def _read_qrels(path: Path) -> list[tuple[int, str, str, int]]:
    rows = []
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise DataError(f"{path}:{bad}: not UTF-8 text") from None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        row = line.split("\t")
        if lineno == 1 and [c.strip().lower() for c in row] == ["query-id", "corpus-id", "score"]:
            continue
        if len(row) != 3:
            raise DataError(f"{path}:{lineno}: expected 3 tab-separated fields (query-id, corpus-id, score), "
                            f"got {len(row)}")
        qid, did, score = (c.strip() for c in row)
        try:
            rel = int(score)
        except ValueError:
            raise DataError(f"{path}:{lineno}: score {score!r} is not an integer") from None
        rows.append((lineno, qid, did, rel))
    return rows


def load_beir(data_dir, split: str = "test") -> BeirData:
    """Read a BEIR folder; only queries with judgements in ``qrels/{split}.tsv`` are kept (in file order)."""
    root = Path(data_dir)
    if not root.is_dir():
        raise DataError(f"{root}: retrieval data folder not found (expected corpus.jsonl, queries.jsonl, qrels/)")
    qrels_path = root / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        found = sorted(p.stem for p in (root / "qrels").glob("*.tsv")) if (root / "qrels").is_dir() else []
        raise DataError(f"{qrels_path}: no qrels for split {split!r}"
                        + (f" (available: {', '.join(found)})" if found else " (no qrels/*.tsv files)"))
    corpus_path = root / "corpus.jsonl"
    corpus = _read_records(corpus_path, with_title=True)
    if not corpus:
        raise DataError(f"{corpus_path}: the corpus is empty")
    queries_path = root / "queries.jsonl"
    queries = _read_records(queries_path, with_title=False)
    rows = _read_qrels(qrels_path)
    if not rows:
        raise DataError(f"{qrels_path}: no judgements")
    qrels: dict[str, dict[str, int]] = {}
    for lineno, qid, did, rel in rows:
        if qid not in queries:
            raise DataError(f"{qrels_path}:{lineno}: query-id {qid!r} is not in {queries_path.name}")
        qrels.setdefault(qid, {})[did] = rel
    unknown_docs = sorted({did for rels in qrels.values() for did in rels if did not in corpus})
    query_ids = [q for q in queries if q in qrels]
    return BeirData(doc_ids=list(corpus), documents=list(corpus.values()), query_ids=query_ids,
                    queries=[queries[q] for q in query_ids], qrels=qrels, split=split, source=str(root.resolve()),
                    notes={"judged_documents_not_in_corpus": len(unknown_docs)})


def dev_subset(data: BeirData, n_distractors: int = DEFAULT_DISTRACTORS, seed: int = 0) -> BeirData:
    """Every document relevant to ``data``'s queries plus ``n_distractors`` others drawn with ``seed``.

    The same (data, n_distractors, seed) always gives the same documents, in corpus order, so scores of
    successive checkpoints are comparable and document embeddings can be cached by text. Cost is linear in the
    number of documents; the default 1,000 random distractors keep it small (SciFact's train split: 565
    relevant + 1,000 others = 1,565 of 5,183 abstracts, 30% of the full corpus's encoding time) while each
    query still ranks about 1,500 same-domain abstracts, so the metrics do not saturate: all-MiniLM-L6-v2
    scores nDCG@10 76.5 on it against 66.0 on the whole corpus (train split). The test evaluation always uses
    the whole corpus.
    """
    if n_distractors < 0:
        raise MixCSEError(f"n_distractors must be >= 0, got {n_distractors}")
    relevant = {did for rels in data.qrels.values() for did, rel in rels.items() if rel > 0}
    keep = np.fromiter((d in relevant for d in data.doc_ids), dtype=bool, count=data.n_documents)
    others = np.flatnonzero(~keep)
    take = min(n_distractors, len(others))
    keep[np.random.default_rng(seed).choice(others, size=take, replace=False)] = True
    rows = np.flatnonzero(keep)
    notes = dict(data.notes, dev_subset={"n_distractors": int(take), "seed": seed,
                                         "relevant_documents": int(len(rows) - take),
                                         "full_corpus_documents": data.n_documents})
    return BeirData(doc_ids=[data.doc_ids[i] for i in rows], documents=[data.documents[i] for i in rows],
                    query_ids=list(data.query_ids), queries=list(data.queries), qrels=data.qrels,
                    split=data.split, source=data.source, notes=notes)


# ------------------------------------------------------------------------------------------------ scoring
def _measures():
    import ir_measures

    return {key: ir_measures.parse_measure(name) for key, name in METRICS.items()}


def score_retrieval(query_emb: np.ndarray, doc_emb: np.ndarray, data: BeirData, *, top_k: int = DEEPEST_CUTOFF,
                    backend: str = "auto") -> dict:
    """Exact cosine top-k of every query over every document, then the metrics (x100)."""
    import ir_measures

    if top_k < DEEPEST_CUTOFF:
        raise MixCSEError(f"top_k must be at least {DEEPEST_CUTOFF} (recall@{DEEPEST_CUTOFF} is reported), "
                          f"got {top_k}")
    if len(query_emb) != data.n_queries or len(doc_emb) != data.n_documents:
        raise MixCSEError(f"got {len(query_emb)} query and {len(doc_emb)} document embeddings for "
                          f"{data.n_queries} queries and {data.n_documents} documents")
    t0 = time.perf_counter()
    scores, indices = top_k_cosine(query_emb, doc_emb, top_k, backend=backend)
    t_search = time.perf_counter() - t0
    run = {qid: {data.doc_ids[j]: float(s) for s, j in zip(row_s, row_i)}
           for qid, row_s, row_i in zip(data.query_ids, scores, indices)}
    qrels = {qid: data.qrels[qid] for qid in data.query_ids}
    measures = _measures()
    t0 = time.perf_counter()
    agg = ir_measures.calc_aggregate(list(measures.values()), qrels, run)
    out: dict[str, Any] = {key: 100.0 * float(agg[m]) for key, m in measures.items()}
    out.update(n_queries=data.n_queries, n_documents=data.n_documents,
               seconds={"search": round(t_search, 3), "metrics": round(time.perf_counter() - t0, 3)})
    return out


# ------------------------------------------------------------------------------------------------ encoding
@contextlib.contextmanager
def _max_length(encoder: Any, max_seq_length: int | None):
    """Temporarily set ``encoder.max_seq_length`` (SentenceEncoder, sentence-transformers)."""
    if max_seq_length is None:
        yield getattr(encoder, "max_seq_length", None)
        return
    if max_seq_length < 1:
        raise MixCSEError(f"max_seq_length must be at least 1, got {max_seq_length}")
    if not hasattr(encoder, "max_seq_length"):
        raise MixCSEError(f"{type(encoder).__name__} has no max_seq_length to set; leave it unset")
    backbone = getattr(getattr(encoder, "encoder", None), "backbone", None)
    limit = getattr(getattr(backbone, "config", None), "max_position_embeddings", None) \
        or getattr(encoder, "max_positions", None)  # the onnx backend's
    if limit and max_seq_length > limit:
        raise MixCSEError(f"max_seq_length {max_seq_length} exceeds the model's {limit} positions")
    old = encoder.max_seq_length
    encoder.max_seq_length = max_seq_length
    try:
        yield max_seq_length
    finally:
        encoder.max_seq_length = old


class _Keyed:
    """An encoder whose cache fingerprint includes the truncation length (long documents depend on it)."""

    def __init__(self, encoder: Any, fingerprint: str | None):
        self._encoder = encoder
        self.fingerprint = fingerprint

    def encode(self, sentences: list[str], batch_size: int = 64):
        return encode_raw(self._encoder, sentences, batch_size)


def _encode(encoder: _Keyed, texts: list[str], batch_size: int, cache_dir) -> np.ndarray:
    """Embeddings in input order, ENCODE_CHUNK texts per unit: the tokenised text of a million documents at once
    would take more memory than their embeddings."""
    chunks = {f"chunk-{k}": texts[start:start + ENCODE_CHUNK]
              for k, start in enumerate(range(0, len(texts), ENCODE_CHUNK))}
    if not chunks:
        return np.zeros((0, 0), dtype=np.float32)
    embedded, _ = embed_units(encoder, chunks, batch_size=batch_size, cache_dir=cache_dir)
    return np.concatenate([embedded[k](part) for k, part in chunks.items()])


def evaluate_retrieval(encoder: Any, data: BeirData, *, batch_size: int = 64, max_seq_length: int | None = None,
                       top_k: int = DEEPEST_CUTOFF, backend: str = "auto", cache_dir=None) -> dict:
    """Encode ``data``'s queries and documents with ``encoder`` and score them (see ``score_retrieval``).

    ``encoder``: a ``SentenceEncoder``, anything with ``.encode(list[str], batch_size=...)``, or a callable.
    ``max_seq_length``: truncation length in tokens while encoding; None keeps the encoder's own.
    ``cache_dir``: on-disk embedding cache keyed by the encoder's fingerprint and the length."""
    t_total = time.perf_counter()
    with _max_length(encoder, max_seq_length) as length:
        fp = encoder_fingerprint(encoder)
        keyed = _Keyed(encoder, f"{fp}|max_seq_length={length}" if fp else None)
        t0 = time.perf_counter()
        q_emb = _encode(keyed, data.queries, batch_size, cache_dir)
        d_emb = _encode(keyed, data.documents, batch_size, cache_dir)
        t_encode = time.perf_counter() - t0
    out = score_retrieval(q_emb, d_emb, data, top_k=top_k, backend=backend)
    out["seconds"] = {"encode": round(t_encode, 3), **out["seconds"],
                      "total": round(time.perf_counter() - t_total, 3)}
    out["max_seq_length"] = length
    return out


def protocol(data: BeirData, *, top_k: int = DEEPEST_CUTOFF, backend: str = "auto") -> dict:
    """The settings that define a retrieval number, for the results JSON."""
    from importlib.metadata import version

    from mixcse.models.search import resolve_backend

    return {"data_dir": data.source, "split": data.split, "documents": "(title + ' ' + text).strip()",
            "similarity": "cosine, exact, whole corpus", "top_k": top_k, "search_backend": resolve_backend(backend),
            "identical_query_document_ids": "kept (MTEB default)",
            "metrics": {key: name for key, name in METRICS.items()},
            "metric_library": f"{METRIC_LIBRARY} {version('ir-measures')} "
                              f"(pytrec_eval-terrier {version('pytrec-eval-terrier')})",
            "average": "mean over judged queries", **data.notes}


class RetrievalEvaluator(Evaluator):
    """nDCG@10 (primary), MAP@10, MRR@10 and recall@100 x100 on one split of a BEIR folder, MTEB's protocol.

    ``subset=True`` (checkpoint selection) scores a fixed, seeded sub-corpus (``dev_subset``: the split's relevant
    documents plus ``n_distractors`` others), so that a selection pass costs seconds, not the minutes of the whole
    corpus; selection on the test split is refused. ``max_seq_length``: the truncation length while encoding."""

    section = "retrieval"
    primary_metric = "ndcg@10"
    COLUMNS = {"ndcg@10": "nDCG@10", "map@10": "MAP@10", "mrr@10": "MRR@10", "recall@100": "Recall@100"}

    @property
    def label(self) -> str:
        return self._label

    @classmethod
    def protocol(cls, evaluators, context) -> dict:
        return protocol(evaluators[0].data)

    @classmethod
    def _row(cls, section: dict, model: str | None = None, *, centred: bool = False) -> list[str]:
        from mixcse.evaluation.evaluator import result_row
        from mixcse.utils.tables import number

        return result_row(list(cls.COLUMNS.values()), [number(section.get(k)) for k in cls.COLUMNS], model,
                          centred=centred)

    @classmethod
    def table(cls, section: dict, settings: dict, label: str | None = None) -> list[str]:
        where = settings.get("retrieval", {})
        return [f"Retrieval x100 ({Path(where.get('data_dir', '?')).name}, split {where.get('split', '?')}: "
                f"{section['n_queries']} queries, {section['n_documents']} documents, max length "
                f"{section.get('max_seq_length')})", *cls._row(section, label)]

    @classmethod
    def card(cls, section: dict, settings: dict) -> list[str]:
        where = settings.get("retrieval") or {}
        name = Path(where["data_dir"]).name if where.get("data_dir") else "BEIR"
        return [f"Retrieval on {name} (split {where.get('split', '?')}, {section.get('n_queries')} queries, "
                f"{section.get('n_documents')} documents): x100, exact cosine search over the whole corpus, max length "
                f"{section.get('max_seq_length')}.", "", *cls._row(section, centred=True)]

    def __init__(self, data_dir, split: str = "test", *, max_seq_length: int | None = None, subset: bool = False,
                 n_distractors: int | None = None, seed: int = 0):
        if subset and split == "test":
            raise DataError("selection on a test split is refused: select on train or dev, report on test")
        self.data = load_beir(data_dir, split)
        self.max_seq_length = max_seq_length
        if subset:
            full = self.data.n_documents
            self.data = dev_subset(self.data, seed=seed,
                                   **({} if n_distractors is None else {"n_distractors": n_distractors}))
            self.name, self._label = f"{split}_{self.primary_metric}", f"{Path(data_dir).name} {split} nDCG@10"
            self.description = (f"nDCG@10 x100 on {Path(data_dir).name} {split} ({self.data.n_queries} queries, "
                                f"{self.data.n_documents} of {full} documents: the relevant ones and a seeded sample)")
        else:
            self.name, self._label = "retrieval", f"{Path(data_dir).name} {split} nDCG@10"
            self.description = f"nDCG@10 x100 on {Path(data_dir).name} {split} (whole corpus)"

    def score(self, embeddings, encoder=None, *, batch_size: int = 64, cache_dir=None) -> dict:
        return evaluate_retrieval(encoder, self.data, batch_size=batch_size, max_seq_length=self.max_seq_length,
                                  cache_dir=cache_dir)

    def extras(self, results: dict) -> dict[str, float]:
        out = {k: float(v) for k, v in results.items()
               if k != self.primary_metric and isinstance(v, (int, float)) and not isinstance(v, bool)}
        out["select_seconds"] = float(results["seconds"]["total"])
        return out
