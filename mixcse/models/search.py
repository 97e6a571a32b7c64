"""Exact cosine top-k search: numpy, or faiss (``IndexFlatIP`` on l2-normalised vectors) when it is installed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mixcse.errors import MixCSEError

BACKENDS = ("auto", "numpy", "faiss")


@dataclass(frozen=True)
class SearchHit:
    """One result: row ``index`` of the corpus, its cosine ``score`` and, when known, its ``sentence``."""

    index: int
    score: float
    sentence: str | None = None


def faiss_available() -> bool:
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


def normalize_rows(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(np.atleast_2d(x), dtype=np.float32)
    return x / np.clip(np.linalg.norm(x, axis=1, keepdims=True), 1e-12, None)


def resolve_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise MixCSEError(f"unknown search backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "auto":
        return "faiss" if faiss_available() else "numpy"
    if backend == "faiss" and not faiss_available():
        raise MixCSEError("search backend 'faiss' needs faiss: pip install 'mixcse[faiss]'")
    return backend


def top_k_cosine(queries: np.ndarray, corpus: np.ndarray, top_k: int, *, backend: str = "auto",
                 block: int = 1024, corpus_block: int = 65536) -> tuple[np.ndarray, np.ndarray]:
    """(scores, indices), each (n_queries, min(top_k, n_corpus)), best first; ties go to the lower index.

    numpy scores ``block`` queries against ``corpus_block`` documents at a time and keeps a running top-k, so
    memory beyond the embeddings is one block x corpus_block float32 matrix (256 MB by default), whatever the
    corpus size; faiss blocks its exact search internally."""
    if top_k < 1:
        raise MixCSEError(f"top_k must be >= 1, got {top_k}")
    q, c = normalize_rows(queries), normalize_rows(corpus)
    if c.shape[0] == 0:
        raise MixCSEError("the corpus is empty")
    if q.shape[1] != c.shape[1]:
        raise MixCSEError(f"query embeddings have {q.shape[1]} dimensions, the corpus {c.shape[1]}")
    k = min(top_k, c.shape[0])
    if resolve_backend(backend) == "faiss":
        import faiss

        index = faiss.IndexFlatIP(c.shape[1])
        index.add(c)
        scores, indices = index.search(q, k)
        return scores.astype(np.float32), indices.astype(np.int64)
    scores = np.empty((q.shape[0], k), dtype=np.float32)
    indices = np.empty((q.shape[0], k), dtype=np.int64)
    for start in range(0, q.shape[0], block):
        best_s = np.empty((min(block, q.shape[0] - start), 0), dtype=np.float32)
        best_i = np.empty(best_s.shape, dtype=np.int64)
        for c_start in range(0, c.shape[0], corpus_block):
            sim = q[start:start + block] @ c[c_start:c_start + corpus_block].T
            kk = min(k, sim.shape[1])
            part = np.argpartition(-sim, kk - 1, axis=1)[:, :kk] if kk < sim.shape[1] else \
                np.tile(np.arange(kk), (len(sim), 1))
            best_s = np.concatenate([best_s, np.take_along_axis(sim, part, axis=1)], axis=1)
            best_i = np.concatenate([best_i, part + c_start], axis=1)
            order = np.lexsort((best_i, -best_s), axis=1)[:, :k]  # by score descending, then index ascending
            best_s = np.take_along_axis(best_s, order, axis=1)
            best_i = np.take_along_axis(best_i, order, axis=1)
        indices[start:start + block] = best_i
        scores[start:start + block] = best_s
    return scores, indices


class EncoderMethods:
    """`search` and `similarity` for any encoder class with ``encode(list[str], batch_size=...)`` (torch or ONNX)."""

    def search(self, queries: str | list[str], corpus: list[str] | np.ndarray, top_k: int = 5, *,
               batch_size: int = 64, backend: str = "auto") -> list[list[SearchHit]]:
        """The ``top_k`` corpus entries closest to each query by cosine similarity, best first.

        ``queries``: a sentence or a list of them. ``corpus``: a list of sentences (encoded here) or an (n, d)
        array of this encoder's embeddings (from ``encode`` or ``mixcse encode``). Returns one list of
        ``SearchHit(index, score, sentence)`` per query; ``sentence`` is None when the corpus was given as an array.
        Exact search, with faiss when installed (``backend="auto"``), else numpy.
        """
        queries = [queries] if isinstance(queries, str) else list(queries)
        if not queries:
            return []
        sentences = None
        if isinstance(corpus, np.ndarray):
            corpus_emb = corpus
        else:
            sentences = list(corpus)
            corpus_emb = self.encode(sentences, batch_size=batch_size)
        scores, indices = top_k_cosine(self.encode(queries, batch_size=batch_size), corpus_emb, top_k,
                                       backend=backend)
        return [[SearchHit(int(i), float(s), sentences[i] if sentences is not None else None)
                 for s, i in zip(row_s, row_i)] for row_s, row_i in zip(scores, indices)]

    @staticmethod
    def similarity(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Cosine similarity matrix between rows of a and rows of b."""
        a = np.atleast_2d(a).astype(np.float32)
        b = np.atleast_2d(b).astype(np.float32)
        a = a / np.clip(np.linalg.norm(a, axis=1, keepdims=True), 1e-12, None)
        b = b / np.clip(np.linalg.norm(b, axis=1, keepdims=True), 1e-12, None)
        return a @ b.T
