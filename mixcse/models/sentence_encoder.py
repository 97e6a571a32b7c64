"""Inference API: ``SentenceEncoder.load(path).encode(sentences)`` for any mixcse, sentence-transformers or HF model."""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

import numpy as np
import torch

from mixcse.errors import MixCSEError
from mixcse.models.encoder import Encoder, load_encoder
from mixcse.models.search import EncoderMethods
from mixcse.utils.progress import Progress


def _fingerprint(name_or_path: str, pooler: str) -> str:
    """Identity of the weights + pooler, for embedding caches: content hash of local weight files, else the name."""
    h = hashlib.sha256(f"{pooler}\0".encode())
    root = Path(name_or_path)
    files = sorted(root.rglob("*.safetensors")) if root.is_dir() else []
    if not files:
        h.update(name_or_path.encode())
    for f in files:
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                h.update(chunk)
    return h.hexdigest()[:20]


TORCH_PRECISIONS = ("fp32", "bf16")
BACKENDS = ("torch", "onnx")


class SentenceEncoder(EncoderMethods):
    """Frozen sentence embeddings: length-sorted batches, no padding beyond each batch, input order preserved.

    ``precision="bf16"`` runs the forward pass under bfloat16 autocast (outputs stay float32): on CPUs with AVX512-BF16
    or AMX and on GPUs about twice as fast; not fp32's bits (STS within ~0.01, docs/evaluation.md)."""

    def __init__(self, encoder: Encoder, tokenizer, *, max_seq_length: int | None = None,
                 fingerprint: str | None = None, device: str | torch.device | None = None, precision: str = "fp32"):
        if precision not in TORCH_PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(TORCH_PRECISIONS)}, not {precision!r}")
        self.precision = precision
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.device = torch.device(device) if device else next(encoder.parameters()).device
        # No truncation below what the model can take: evaluation must see whole sentences.
        limit = getattr(encoder.backbone.config, "max_position_embeddings", None) or 512
        self.max_seq_length = min(max_seq_length or limit, limit)
        self.fingerprint = fingerprint

    @classmethod
    def load(cls, name_or_path: str | os.PathLike, *, pooler: str | None = None, device: str | None = None,
             trust_remote_code: bool = False, precision: str = "fp32", backend: str = "torch",
             threads: int | None = None):
        """A `SentenceEncoder` (``backend="torch"``), or with ``backend="onnx"`` an
        `mixcse.models.onnx_backend.OnnxSentenceEncoder` (same interface, onnxruntime on the folder's ``onnx/model.onnx``
        written by ``mixcse export``; ``precision="int8"`` takes ``onnx/model_qint8.onnx``; ``threads``: its
        intra-op threads)."""
        if backend not in BACKENDS:
            raise MixCSEError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
        if backend == "onnx":
            from mixcse.models.onnx_backend import OnnxSentenceEncoder

            if device not in (None, "cpu"):
                raise MixCSEError(f"the onnx backend runs on the CPU; --device {device} is for the torch backend")
            if trust_remote_code:
                raise MixCSEError("the onnx backend runs an exported graph; --trust-remote-code is for the torch "
                                  "backend")
            return OnnxSentenceEncoder.load(name_or_path, pooler=pooler, precision=precision, threads=threads)
        name_or_path = str(name_or_path)
        encoder, tokenizer, info = load_encoder(name_or_path, pooler=pooler, trust_remote_code=trust_remote_code)
        encoder.eval()
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")  # as sentence-transformers does
        encoder.to(device)
        fingerprint = _fingerprint(name_or_path, encoder.test_pooler) + ("" if precision == "fp32" else f"-{precision}")
        return cls(encoder, tokenizer, max_seq_length=info["max_seq_length"], fingerprint=fingerprint, device=device,
                   precision=precision)

    @property
    def pooler(self) -> str:
        return self.encoder.test_pooler

    @property
    def dimension(self) -> int:
        return self.encoder.hidden_size

    def _autocast(self):
        """bf16 autocast when asked for; autocast is thread-local, so each encoding thread enters its own."""
        if self.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    @torch.inference_mode()
    def encode(self, sentences: list[str], batch_size: int = 64, show_progress: bool = False,
               progress_every: float = 30.0) -> np.ndarray:
        """(len(sentences), d) float32 embeddings, in input order.

        ``show_progress``: a bar on a terminal, else a plain line on stderr every ``progress_every`` seconds and one
        at the end (mixcse.utils.progress.Progress)."""
        if isinstance(sentences, str):
            raise TypeError("encode takes a list of sentences, not a single string")
        n = len(sentences)
        if n == 0:
            return np.zeros((0, self.encoder.hidden_size), dtype=np.float32)
        ids = self.tokenizer(list(sentences), truncation=True, max_length=self.max_seq_length,
                             add_special_tokens=True)["input_ids"]
        order = np.argsort([-len(x) for x in ids], kind="stable")
        was_training = self.encoder.training
        self.encoder.eval()
        out = np.empty((n, self.encoder.hidden_size), dtype=np.float32)
        with Progress(n, "encode", "sentences", enabled=show_progress, every_seconds=progress_every) as progress, \
                self._autocast():
            for start in range(0, n, batch_size):
                idx = order[start:start + batch_size]
                batch = self.tokenizer.pad({"input_ids": [ids[i] for i in idx]}, return_tensors="pt")
                batch = {k: v.to(self.device) for k, v in batch.items()}
                out[idx] = self.encoder(batch, use_head=None).float().cpu().numpy()
                progress.update(len(idx))
        self.encoder.train(was_training)
        return out

    __call__ = encode

    def _widths(self, lengths: np.ndarray, batch_size: int) -> np.ndarray:
        """The padded width `encode` gives each sentence: its length-sorted batch's longest."""
        order = np.argsort(-lengths, kind="stable")
        width = np.empty(len(lengths), dtype=np.int64)
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            width[idx] = lengths[idx[0]]
        return width

    def _forward(self, rows: list[list[int]], width: int) -> np.ndarray:
        with torch.inference_mode(), self._autocast():  # thread-local: set in each worker thread
            batch = self.tokenizer.pad({"input_ids": rows}, padding="max_length", max_length=width,
                                       return_tensors="pt")
            return self.encoder({k: v.to(self.device) for k, v in batch.items()}, use_head=None).float().cpu().numpy()

    def rows_are_independent(self, sentences: list[str], batch_size: int = 64) -> bool:
        """Whether a sentence's embedding depends only on its padded width, not on its batch-mates or the batch
        size, here: one of `encode`'s batches against the same rows reversed, in batches of a different size, and
        the shortest sentence alone against copies of it in one batch."""
        was_training = self.encoder.training
        self.encoder.eval()  # the kernels are asked, not dropout: no masks drawn, no random state used
        try:
            return self._rows_are_independent(sentences, batch_size)
        finally:
            self.encoder.train(was_training)

    def _rows_are_independent(self, sentences: list[str], batch_size: int) -> bool:
        ids = self.tokenizer(list(sentences[:batch_size]), truncation=True, max_length=self.max_seq_length)["input_ids"]
        width = max(len(x) for x in ids)
        whole = self._forward(ids, width)
        half = max(len(ids) // 2, 1)
        rev = ids[::-1]
        parts = np.concatenate([self._forward(rev[:half], width), self._forward(rev[half:], width)])[::-1] \
            if len(ids) > 1 else self._forward(rev, width)
        if not np.array_equal(whole, parts):
            return False
        # the shortest sequence alone against copies of it in one batch: some CPU kernels change their summation
        # order with the number of rows when the matrices are tiny
        shortest = min(ids, key=len)
        alone = self._forward([shortest], len(shortest))
        return all(np.array_equal(alone, self._forward([shortest] * k, len(shortest))[:1])
                   for k in sorted({2, 3, max(batch_size, 2)}))

    def encode_units(self, units: dict[str, list[str]], batch_size: int = 64, show_progress: bool = False,
                     threads: int | None = None) -> dict[str, np.ndarray]:
        """{name: embeddings of that list of distinct sentences}, bit for bit what `encode(list, batch_size)`
        gives each list on its own, when rows are independent of their batch-mates (`rows_are_independent`).

        `encode` pads each sentence to its length-sorted batch's longest; here each (sentence, padded width) that
        any list needs is computed once, in batches of `batch_size` rows of one width, on `threads` threads of
        one torch thread each (default: torch's thread count; the model's kernels give the same bits at any
        thread count, and independent batches scale better on a few cores than one batch's threads do)."""
        from concurrent.futures import ThreadPoolExecutor

        distinct = list(dict.fromkeys(s for ss in units.values() for s in ss))
        ids = self.tokenizer(distinct, truncation=True, max_length=self.max_seq_length)["input_ids"] \
            if distinct else []
        lengths = np.asarray([len(x) for x in ids], dtype=np.int64)
        where = {s: i for i, s in enumerate(distinct)}
        jobs: dict[tuple[int, int], int] = {}  # (sentence, width) -> row of the result
        plan = {}
        for name, sentences in units.items():
            rows = np.asarray([where[s] for s in sentences], dtype=np.int64)
            widths = self._widths(lengths[rows], batch_size)
            plan[name] = np.asarray([jobs.setdefault((int(r), int(w)), len(jobs)) for r, w in zip(rows, widths)],
                                    dtype=np.int64)
        by_width: dict[int, list[tuple[int, int]]] = {}
        for (sentence, width), row in jobs.items():
            by_width.setdefault(width, []).append((row, sentence))
        batches = [(width, members[i:i + batch_size]) for width in sorted(by_width, reverse=True)
                   for members in [by_width[width]] for i in range(0, len(members), batch_size)]
        out = np.empty((len(jobs), self.encoder.hidden_size), dtype=np.float32)
        threads = threads or torch.get_num_threads()
        was_training, before = self.encoder.training, torch.get_num_threads()
        self.encoder.eval()
        torch.set_num_threads(1)

        def run(batch):
            width, members = batch
            out[[row for row, _ in members]] = self._forward([ids[s] for _, s in members], width)
            return len(members)

        try:
            with Progress(len(jobs), "encode", "sentences", enabled=show_progress) as progress, \
                    ThreadPoolExecutor(max_workers=threads) as pool:
                for done in pool.map(run, batches):
                    progress.update(done)
        finally:
            torch.set_num_threads(before)
            self.encoder.train(was_training)
        return {name: out[rows] for name, rows in plan.items()}
