"""Torch inference: ``SentenceEncoder.load(path).encode(sentences)`` for any mixcse, sentence-transformers or HF model.

The encode loop, search and similarity are `mixcse.models.inference.EncoderBase`'s; this module adds the torch
forward pass (fp32 or bf16 autocast) and `encode_units`, the evaluation's computation of each (sentence, padded
width) once across tasks."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np
import torch

from mixcse.models.encoder import Encoder, load_encoder
from mixcse.models.inference import PRECISIONS, EncoderBase, open_encoder
from mixcse.utils.files import file_digest
from mixcse.utils.progress import Progress


def _fingerprint(name_or_path: str, pooler: str) -> str:
    """Identity of the weights + pooler, for embedding caches: content hash of local weight files, else the name."""
    root = Path(name_or_path)
    files = sorted(root.rglob("*.safetensors")) if root.is_dir() else []
    prefix = f"{pooler}\0".encode() + (b"" if files else name_or_path.encode())
    return file_digest(files, prefix=prefix)[:20]


TORCH_PRECISIONS = PRECISIONS["torch"]


class SentenceEncoder(EncoderBase):
    """Frozen sentence embeddings from a torch `Encoder` (the encode loop, search and similarity of `EncoderBase`).

    ``precision="bf16"`` runs the forward pass under bfloat16 autocast (outputs stay float32): on CPUs with AVX512-BF16
    or AMX and on GPUs about twice as fast; not fp32's bits (docs/performance.md gives what moves and by how much).
    ``threads``: torch's intra-op threads while encoding (default: torch's setting)."""

    backend = "torch"

    def __init__(self, encoder: Encoder, tokenizer, *, max_seq_length: int | None = None,
                 fingerprint: str | None = None, device: str | torch.device | None = None, precision: str = "fp32",
                 threads: int | None = None):
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
        self.threads = threads

    @classmethod
    def load(cls, name_or_path: str | os.PathLike, *, pooler: str | None = None, device: str | None = None,
             trust_remote_code: bool = False, precision: str = "fp32", backend: str = "torch",
             threads: int | None = None):
        """A `SentenceEncoder` (``backend="torch"``), or with ``backend="onnx"`` an `OnnxSentenceEncoder` (same
        interface, onnxruntime on the folder's ``onnx/model.onnx`` written by ``mixcse export``; ``precision="int8"``
        takes ``onnx/model_qint8.onnx``): `mixcse.models.inference.open_encoder`, the one backend dispatch."""
        return open_encoder(name_or_path, backend=backend, pooler=pooler, precision=precision, device=device,
                            threads=threads, trust_remote_code=trust_remote_code)

    @classmethod
    def open(cls, name_or_path: str | os.PathLike, *, pooler: str | None = None, precision: str = "fp32",
             device: str | None = None, threads: int | None = None, trust_remote_code: bool = False):
        """The torch backend of `open_encoder`: a mixcse, sentence-transformers or Hugging Face model."""
        if precision not in TORCH_PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(TORCH_PRECISIONS)}, not {precision!r}")
        name_or_path = str(name_or_path)
        encoder, tokenizer, info = load_encoder(name_or_path, pooler=pooler, trust_remote_code=trust_remote_code)
        encoder.eval()
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")  # as sentence-transformers does
        encoder.to(device)
        fingerprint = _fingerprint(name_or_path, encoder.test_pooler) + ("" if precision == "fp32" else f"-{precision}")
        return cls(encoder, tokenizer, max_seq_length=info["max_seq_length"], fingerprint=fingerprint, device=device,
                   precision=precision, threads=threads)

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

    @contextlib.contextmanager
    def _session(self):
        """One `encode` call: eval mode, no autograd, autocast, ``threads``; the module's mode and torch's thread
        count restored after."""
        was_training, before = self.encoder.training, torch.get_num_threads()
        self.encoder.eval()
        if self.threads:
            torch.set_num_threads(self.threads)
        try:
            with torch.inference_mode(), self._autocast():
                yield
        finally:
            torch.set_num_threads(before)
            self.encoder.train(was_training)

    def _forward(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        batch = {"input_ids": torch.from_numpy(input_ids).to(self.device),
                 "attention_mask": torch.from_numpy(attention_mask).to(self.device)}
        return self.encoder(batch, use_head=None).float().cpu().numpy()

    def _rows(self, rows: list[list[int]], width: int) -> np.ndarray:
        """``rows`` padded to ``width``, encoded: what `encode` computes for them in a batch of that width."""
        with torch.inference_mode(), self._autocast():  # thread-local: set in each worker thread
            return self._forward(*self._pad(rows, width))

    def _widths(self, lengths: np.ndarray, batch_size: int) -> np.ndarray:
        """The padded width `encode` gives each sentence: its length-sorted batch's longest."""
        order = np.argsort(-lengths, kind="stable")
        width = np.empty(len(lengths), dtype=np.int64)
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            width[idx] = lengths[idx[0]]
        return width

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
        ids = self._tokenize(sentences[:batch_size])
        width = max(len(x) for x in ids)
        whole = self._rows(ids, width)
        half = max(len(ids) // 2, 1)
        rev = ids[::-1]
        parts = np.concatenate([self._rows(rev[:half], width), self._rows(rev[half:], width)])[::-1] \
            if len(ids) > 1 else self._rows(rev, width)
        if not np.array_equal(whole, parts):
            return False
        # the shortest sequence alone against copies of it in one batch: some CPU kernels change their summation
        # order with the number of rows when the matrices are tiny
        shortest = min(ids, key=len)
        alone = self._rows([shortest], len(shortest))
        return all(np.array_equal(alone, self._rows([shortest] * k, len(shortest))[:1])
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
        ids = self._tokenize(distinct) if distinct else []
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
        threads = threads or self.threads or torch.get_num_threads()
        was_training, before = self.encoder.training, torch.get_num_threads()
        self.encoder.eval()
        torch.set_num_threads(1)

        def run(batch):
            width, members = batch
            out[[row for row, _ in members]] = self._rows([ids[s] for _, s in members], width)
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
