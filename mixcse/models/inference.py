"""The one inference path: ``EncoderBase`` (the encode loop, ``search``, ``similarity``) and ``open_encoder``.

Both encoders inherit ``EncoderBase`` and implement only their forward pass on a padded batch: `SentenceEncoder`
(torch, fp32 or bf16 autocast) and `OnnxSentenceEncoder` (onnxruntime, fp32 or an int8 graph). ``open_encoder`` is
the one place that turns a model name or folder and a backend into an encoder; it imports neither backend until
asked, so the onnx backend runs where torch is not installed.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from typing import Any

import numpy as np

from mixcse.errors import MixCSEError
from mixcse.models.search import SearchHit, normalize_rows, top_k_cosine
from mixcse.utils.progress import Progress

BACKENDS = ("torch", "onnx")
PRECISIONS = {"torch": ("fp32", "bf16"), "onnx": ("fp32", "int8")}  # bf16: autocast; int8: a quantised graph
# Each backend's encoder class, imported on first use by module name: the backends' modules import this one, and
# the onnx one must not pull in torch.
ENCODER_CLASSES = {"torch": ("mixcse.models.sentence_encoder", "SentenceEncoder"),
                   "onnx": ("mixcse.models.onnx_backend", "OnnxSentenceEncoder")}


class EncoderBase:
    """Frozen sentence embeddings: tokenised with truncation at ``max_seq_length``, length-sorted batches padded to
    their own longest sentence, rows returned in input order. A subclass sets ``tokenizer``, ``max_seq_length``,
    ``dimension`` and implements ``_forward`` (and, when it needs one, ``_session``: the context of one call)."""

    tokenizer: Any
    max_seq_length: int
    dimension: int

    def _forward(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """(rows, d) float32 embeddings of one padded batch ((rows, width) int64 arrays)."""
        raise NotImplementedError

    def _session(self):
        return contextlib.nullcontext()

    def _tokenize(self, sentences: list[str]) -> list[list[int]]:
        return self.tokenizer(list(sentences), truncation=True, max_length=self.max_seq_length,
                              add_special_tokens=True)["input_ids"]

    def _pad(self, rows: list[list[int]], width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, attention_mask) as int64 arrays, padded to the longest row or to ``width``."""
        fixed = {"padding": "max_length", "max_length": width} if width else {}
        batch = self.tokenizer.pad({"input_ids": rows}, return_tensors="np", **fixed)
        return batch["input_ids"].astype(np.int64), batch["attention_mask"].astype(np.int64)

    def encode(self, sentences: list[str], batch_size: int = 64, show_progress: bool = False,
               progress_every: float = 30.0) -> np.ndarray:
        """(len(sentences), d) float32 embeddings, in input order.

        ``show_progress``: a bar on a terminal, else a plain line on stderr every ``progress_every`` seconds and one
        at the end (mixcse.utils.progress.Progress)."""
        if isinstance(sentences, str):
            raise TypeError("encode takes a list of sentences, not a single string")
        n = len(sentences)
        out = np.empty((n, self.dimension), dtype=np.float32)
        if n == 0:
            return out
        ids = self._tokenize(sentences)
        order = np.argsort([-len(x) for x in ids], kind="stable")
        with Progress(n, "encode", "sentences", enabled=show_progress, every_seconds=progress_every) as progress, \
                self._session():
            for start in range(0, n, batch_size):
                idx = order[start:start + batch_size]
                out[idx] = self._forward(*self._pad([ids[i] for i in idx]))
                progress.update(len(idx))
        return out

    def __call__(self, *args, **kwargs) -> np.ndarray:
        return self.encode(*args, **kwargs)

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
        return normalize_rows(a) @ normalize_rows(b).T


def open_encoder(name_or_path: Any, *, backend: str = "torch", pooler: str | None = None, precision: str = "fp32",
                 device: str | None = None, threads: int | None = None, trust_remote_code: bool = False):
    """An encoder for a model name or folder: `SentenceEncoder` (``backend="torch"``: a mixcse,
    sentence-transformers or Hugging Face model; ``precision`` "fp32" or "bf16" autocast) or `OnnxSentenceEncoder`
    (``backend="onnx"``: the folder's ``onnx/model.onnx`` written by ``mixcse export``, or with ``precision="int8"``
    ``onnx/model_qint8.onnx``; CPU only). ``threads``: the backend's intra-op threads. An encoder object (anything
    with ``encode``) or a callable is returned unchanged. Bad input raises `MixCSEError`."""
    if not isinstance(name_or_path, (str, os.PathLike)):
        if hasattr(name_or_path, "encode") or callable(name_or_path):
            return name_or_path
        raise TypeError(f"not an encoder: {type(name_or_path).__name__} (need .encode(list[str]) or a callable)")
    if backend not in BACKENDS:
        raise MixCSEError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if backend == "onnx" and device not in (None, "cpu"):
        raise MixCSEError(f"the onnx backend runs on the CPU; --device {device} is for the torch backend")
    if backend == "onnx" and trust_remote_code:
        raise MixCSEError("the onnx backend runs an exported graph; --trust-remote-code is for the torch backend")
    module, name = ENCODER_CLASSES[backend]
    return getattr(importlib.import_module(module), name).open(
        name_or_path, pooler=pooler, precision=precision, device=device, threads=threads,
        trust_remote_code=trust_remote_code)
