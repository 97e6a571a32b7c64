"""Training data: the text a run reads, tokenised once, batched in a seeded order.

Interface:
    CorpusLoader(cfg) then .open(tokenizer, progress=True) -> (Corpus, description line): what ``train`` calls;
        the in-memory ``TokenizedCorpus`` (``corpus: memory``) or the on-disk ``shards.ShardedCorpus``
        (``corpus: disk``). ``open_corpus(cfg, tokenizer)`` does both.
    Corpus (Protocol): ``len(corpus)`` (number of segments; batch indices lie in ``range(len(corpus))``) and
        ``corpus.batch(indices) -> {"input_ids", "attention_mask"}`` (int64 tensors, padded to the batch's longest
        sequence). ``TokenizedCorpus`` is the in-memory implementation; another (e.g. on-disk) corpus needs
        only these two.
    TokenizedCorpus(sentences, tokenizer, max_seq_length, indices=None): tokenises ``sentences[indices]`` (the ones a
        run uses) in one call; ``.stats`` = {sequences, tokens, truncated, truncated_share, max_seq_length} of that
        pass (tokens include special tokens; truncated_share is None for a tokenizer that cannot tell).
    PairedCorpus(pairs, tokenizer, max_seq_length, indices=None): (anchor, positive) pairs (``positives``), whose
        batches add ``positive_input_ids`` / ``positive_attention_mask`` (the second view).
    BatchPlan(n_sentences, batch_size, seed): which indices form each global batch.
    read_sentences(path, *, max_sentences=None, dedupe=False) -> list[str]: the non-blank lines of a plain or .gz
        file (``documents.read_segments`` in ``line`` mode; see mixcse/documents.py for documents).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from .documents import Segments, describe, read_positive_pairs, read_segments, read_training_text
from .errors import DataError


@runtime_checkable
class Corpus(Protocol):
    def __len__(self) -> int: ...

    def batch(self, indices: np.ndarray) -> dict[str, torch.Tensor]: ...


class CorpusLoader:
    """The corpus ``cfg`` trains on, in two phases so that bad input fails before the model loads.

    ``CorpusLoader(cfg)`` reads the text (``corpus: memory``; raises ``DataError`` for a bad file) or checks the
    file and reading options (``corpus: disk``, which reads while it tokenises). ``.open(tokenizer)`` returns
    (the ``Corpus``, the line that describes it): an in-memory ``TokenizedCorpus`` of the segments the run uses, or
    a ``shards.ShardedCorpus`` built on first use.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        if cfg.corpus == "disk":
            Segments(cfg.train_file, text_column=cfg.text_column, segment=cfg.segment, min_words=cfg.min_words,
                     dedupe=cfg.dedupe, max_sentences=cfg.max_sentences)
        elif cfg.positives != "dropout":
            self.sentences, self.text_stats = read_positive_pairs(
                cfg.train_file, positives=cfg.positives, text_column=cfg.text_column, min_words=cfg.min_words,
                dedupe=cfg.dedupe, max_sentences=cfg.max_sentences)
            self.plan = BatchPlan(len(self.sentences), cfg.batch_size, cfg.seed)
        else:
            self.sentences, self.text_stats = read_training_text(cfg)
            self.plan = BatchPlan(len(self.sentences), cfg.batch_size, cfg.seed)

    def open(self, tokenizer, *, progress: bool = True) -> tuple[Corpus, str]:
        cfg = self.cfg
        if cfg.corpus == "disk":
            from .shards import open_sharded_corpus

            corpus = open_sharded_corpus(cfg, tokenizer, cache_dir=cfg.corpus_cache_dir, progress=progress)
            return corpus, describe(corpus.stats["text"], corpus.stats["tokens"])
        used = self.plan.used_indices(self.plan.total_steps(cfg))
        if cfg.positives != "dropout":
            memory = PairedCorpus(self.sentences, tokenizer, cfg.max_seq_length, used)
        else:
            memory = TokenizedCorpus(self.sentences, tokenizer, cfg.max_seq_length, used)
        self.sentences = None  # the token ids are what the run keeps
        return memory, describe(self.text_stats, memory.stats)


def open_corpus(cfg, tokenizer, *, progress: bool = True) -> tuple[Corpus, str]:
    """``CorpusLoader(cfg).open(tokenizer)``: both phases at once."""
    return CorpusLoader(cfg).open(tokenizer, progress=progress)


def read_sentences(path: str | Path, *, max_sentences: int | None = None, dedupe: bool = False) -> list[str]:
    """Non-blank, stripped lines; strict UTF-8 so that a binary or mis-encoded file fails loudly, with its line."""
    return read_segments(path, segment="line", min_words=1, dedupe=dedupe, max_sentences=max_sentences)[0]


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
            # permutation(n) is arange(n) shuffled: the same order, in half the memory when int32 holds n
            order = np.arange(self.n, dtype=np.int32 if self.n < 2**31 else np.int64)
            np.random.default_rng([self.seed, epoch]).shuffle(order)
            self._orders = {epoch: order}  # one epoch at a time: a corpus of 10^8 sentences is 400 MB of order
        return self._orders[epoch]

    def total_steps(self, cfg) -> int:
        return cfg.max_steps or self.steps_per_epoch * cfg.epochs

    def indices(self, step: int) -> np.ndarray:
        epoch, within = divmod(step, self.steps_per_epoch)
        return self.order(epoch)[within * self.batch_size:(within + 1) * self.batch_size]

    def used_indices(self, total_steps: int) -> np.ndarray:
        epochs = -(-total_steps // self.steps_per_epoch)
        if epochs > 1:
            return np.arange(self.n)
        return np.sort(self.order(0)[: total_steps * self.batch_size])


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
