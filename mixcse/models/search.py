"""Exact cosine top-k search: numpy, or faiss (``IndexFlatIP`` on l2-normalised vectors) when it is installed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mixcse.errors import MixCSEError

INDEXES = ("auto", "numpy", "faiss")  # exact search engines (`mixcse search --index`)


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
    if backend not in INDEXES:
        raise MixCSEError(f"unknown search backend {backend!r}; choose one of {', '.join(INDEXES)}")
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
