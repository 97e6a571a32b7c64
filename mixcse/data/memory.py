"""The in-memory corpus (``corpus: memory``): the sentences a run uses, tokenised once ahead of training.

Interface:
    TokenizedCorpus(sentences, tokenizer, max_seq_length, indices=None): tokenises ``sentences[indices]`` (the ones a
        run uses) in one call; ``.stats`` = {sequences, tokens, truncated, truncated_share, max_seq_length} of that
        pass (tokens include special tokens; truncated_share is None for a tokenizer that cannot tell).
    PairedCorpus(pairs, tokenizer, max_seq_length, indices=None): (anchor, positive) pairs (``positives``), whose
        batches add ``positive_input_ids`` / ``positive_attention_mask`` (the second view).
    pad_batch(seqs, pad_id) -> {"input_ids", "attention_mask"}: token-id lists as one padded batch (the on-disk
        corpus, mixcse/data/disk.py, pads with it too).

Both are a ``loader.Corpus``: ``len(corpus)`` and ``corpus.batch(indices)``.
"""

from __future__ import annotations

import numpy as np
import torch


class TokenizedCorpus:
    """Token ids of the sentences a run will use, tokenised in one call ahead of training (a ``Corpus``)."""

    def __init__(self, sentences: list[str], tokenizer, max_seq_length: int, indices: np.ndarray | None = None):
        indices = np.arange(len(sentences)) if indices is None else indices
        encoded = tokenizer([sentences[i] for i in indices], truncation=True, max_length=max_seq_length,
                            add_special_tokens=True, return_attention_mask=False, return_token_type_ids=False)
        self._ids = dict(zip(indices.tolist(), encoded["input_ids"]))
        self._size = len(sentences)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        # A fast tokenizer keeps what truncation cut off in each encoding's ``overflowing``; a slow one does not say.
        truncated = sum(bool(e.overflowing) for e in encoded.encodings) if encoded.encodings is not None else None
        self.stats = {"sequences": len(self._ids), "tokens": sum(len(ids) for ids in encoded["input_ids"]),
                      "truncated": truncated, "max_seq_length": max_seq_length,
                      "truncated_share": None if truncated is None else truncated / max(len(self._ids), 1)}

    def __len__(self) -> int:
        return self._size

    def batch(self, indices: np.ndarray) -> dict[str, torch.Tensor]:
        """Padded to the batch's own longest sequence."""
        return pad_batch([self._ids[int(i)] for i in indices], self.pad_id)


def pad_batch(seqs: list, pad_id: int) -> dict[str, torch.Tensor]:
    """Token-id sequences as one batch, padded to the longest: int64 ``input_ids`` and ``attention_mask``."""
    width = max(len(s) for s in seqs)
    input_ids = np.full((len(seqs), width), pad_id, dtype=np.int64)
    attention = np.zeros((len(seqs), width), dtype=np.int64)
    for row, seq in enumerate(seqs):
        input_ids[row, : len(seq)] = seq
        attention[row, : len(seq)] = 1
    return {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(attention)}


class PairedCorpus:
    """(anchor, positive) pairs (``positives: neighbours | title``), tokenised like ``TokenizedCorpus``.

    ``batch(indices)`` holds the anchors under the usual keys and their positives under ``positive_input_ids`` and
    ``positive_attention_mask``; the step then encodes anchors as view 1 and positives as view 2 (each still
    with its own dropout mask) instead of the anchors twice."""

    def __init__(self, pairs: list[tuple[str, str]], tokenizer, max_seq_length: int, indices: np.ndarray | None = None):
        self._anchors = TokenizedCorpus([a for a, _ in pairs], tokenizer, max_seq_length, indices)
        self._positives = TokenizedCorpus([p for _, p in pairs], tokenizer, max_seq_length, indices)
        a, p = self._anchors.stats, self._positives.stats
        truncated = None if a["truncated"] is None else a["truncated"] + p["truncated"]
        self.stats = {"sequences": a["sequences"], "tokens": a["tokens"] + p["tokens"], "truncated": truncated,
                      "max_seq_length": max_seq_length,
                      "truncated_share": None if truncated is None else truncated / max(2 * a["sequences"], 1)}

    def __len__(self) -> int:
        return len(self._anchors)

    def batch(self, indices: np.ndarray) -> dict[str, torch.Tensor]:
        positives = self._positives.batch(indices)
        return self._anchors.batch(indices) | {f"positive_{k}": v for k, v in positives.items()}
