"""Training text: one sentence per line (plain or .gz), tokenised once, batched in a seeded order."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import numpy as np
import torch

from .errors import DataError


def read_sentences(path: str | Path, *, max_sentences: int | None = None, dedupe: bool = False) -> list[str]:
    """Non-blank, stripped lines; strict UTF-8 so that a binary or mis-encoded file fails loudly, with its line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"training file not found: {path}")
    opener = gzip.open if path.suffix == ".gz" else open
    sentences: list[str] = []
    seen: set[str] = set()
    try:
        with opener(path, "rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                if b"\0" in raw:
                    raise DataError(f"{path}:{lineno}: not a text file (NUL byte)")
                try:
                    line = raw.decode("utf-8").strip()
                except UnicodeDecodeError:
                    raise DataError(f"{path}:{lineno}: not UTF-8 text") from None
                if not line or (dedupe and line in seen):
                    continue
                if dedupe:
                    seen.add(line)
                sentences.append(line)
                if max_sentences is not None and len(sentences) >= max_sentences:
                    break
    except (OSError, EOFError, zlib.error) as exc:  # e.g. a truncated or fake .gz
        raise DataError(f"cannot read {path}: {exc}") from None
    if not sentences:
        raise DataError(f"training file has no sentences: {path}")
    return sentences


class BatchPlan:
    """Which sentences form global batch ``step``: epoch e is a permutation drawn from (seed, e).

    The order depends only on (seed, number of sentences, batch size), so a resumed run, any preset and any number
    of ranks see the same batches. The last incomplete batch of an epoch is dropped: a contrastive batch needs
    negatives, and equal-size batches keep steps comparable.
    """

    def __init__(self, n_sentences: int, batch_size: int, seed: int):
        if n_sentences < batch_size:
            raise DataError(f"the corpus has {n_sentences} sentences, fewer than one batch of {batch_size}")
        self.n, self.batch_size, self.seed = n_sentences, batch_size, seed
        self.steps_per_epoch = n_sentences // batch_size
        self._orders: dict[int, np.ndarray] = {}

    def order(self, epoch: int) -> np.ndarray:
        if epoch not in self._orders:
            self._orders[epoch] = np.random.default_rng([self.seed, epoch]).permutation(self.n)
        return self._orders[epoch]

    def indices(self, step: int) -> np.ndarray:
        epoch, within = divmod(step, self.steps_per_epoch)
        return self.order(epoch)[within * self.batch_size:(within + 1) * self.batch_size]

    def used_indices(self, total_steps: int) -> np.ndarray:
        epochs = -(-total_steps // self.steps_per_epoch)
        if epochs > 1:
            return np.arange(self.n)
        return np.sort(self.order(0)[: total_steps * self.batch_size])


class TokenizedCorpus:
    """Token ids of the sentences a run will use, tokenised in one call ahead of training."""

    def __init__(self, sentences: list[str], tokenizer, max_seq_length: int, indices: np.ndarray | None = None):
        indices = np.arange(len(sentences)) if indices is None else indices
        encoded = tokenizer([sentences[i] for i in indices], truncation=True, max_length=max_seq_length,
                            add_special_tokens=True, return_attention_mask=False, return_token_type_ids=False)
        self._ids = dict(zip(indices.tolist(), encoded["input_ids"]))
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    def batch(self, indices: np.ndarray) -> dict[str, torch.Tensor]:
        """Padded to the batch's own longest sequence."""
        seqs = [self._ids[int(i)] for i in indices]
        width = max(len(s) for s in seqs)
        input_ids = np.full((len(seqs), width), self.pad_id, dtype=np.int64)
        attention = np.zeros((len(seqs), width), dtype=np.int64)
        for row, seq in enumerate(seqs):
            input_ids[row, : len(seq)] = seq
            attention[row, : len(seq)] = 1
        return {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(attention)}
