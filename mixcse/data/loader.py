"""Training data: the text a run reads, tokenised once, batched in a seeded order.

Interface:
    CorpusLoader(cfg) then .open(tokenizer, progress=True) -> (Corpus, description line): what ``train`` calls;
        the in-memory ``memory.TokenizedCorpus`` (``corpus: memory``) or the on-disk ``disk.ShardedCorpus``
        (``corpus: disk``). ``open_corpus(cfg, tokenizer)`` does both.
    Corpus (Protocol): ``len(corpus)`` (number of segments; batch indices lie in ``range(len(corpus))``) and
        ``corpus.batch(indices) -> {"input_ids", "attention_mask"}`` (int64 tensors, padded to the batch's longest
        sequence). ``memory.TokenizedCorpus`` is the in-memory implementation; another corpus needs only these two.
    BatchPlan(n_sentences, batch_size, seed): which indices form each global batch.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import torch

from mixcse.data.disk import open_sharded_corpus
from mixcse.data.documents import PAIR_KINDS, Segments, describe, read_positive_pairs, read_training_text
from mixcse.data.memory import PairedCorpus, TokenizedCorpus
from mixcse.errors import DataError


@runtime_checkable
class Corpus(Protocol):
    def __len__(self) -> int: ...

    def batch(self, indices: np.ndarray) -> dict[str, torch.Tensor]: ...


class CorpusLoader:
    """The corpus ``cfg`` trains on, in two phases so that bad input fails before the model loads.

    ``CorpusLoader(cfg)`` reads the text (``corpus: memory``; raises ``DataError`` for a bad file) or checks the
    file and reading options (``corpus: disk``, which reads while it tokenises). ``.open(tokenizer)`` returns
    (the ``Corpus``, the line that describes it): an in-memory ``TokenizedCorpus`` of the segments the run uses, or
    a ``disk.ShardedCorpus`` built on first use. ``.plan`` is the run's ``BatchPlan`` (after ``open`` for disk).
    """

    def __init__(self, cfg):
        self.cfg = cfg
        if cfg.corpus == "disk":
            Segments(cfg.train_file, text_column=cfg.text_column, segment=cfg.segment, min_words=cfg.min_words,
                     dedupe=cfg.dedupe, max_sentences=cfg.max_sentences)
            return
        if cfg.positives in PAIR_KINDS:
            self.sentences, self.text_stats = read_positive_pairs(
                cfg.train_file, positives=cfg.positives, text_column=cfg.text_column, min_words=cfg.min_words,
                dedupe=cfg.dedupe, max_sentences=cfg.max_sentences)
        else:
            self.sentences, self.text_stats = read_training_text(cfg)
        self.plan = BatchPlan(len(self.sentences), cfg.batch_size, cfg.seed)

    def open(self, tokenizer, *, progress: bool = True,
             pairs: list[tuple[str, str]] | None = None) -> tuple[Corpus, str]:
        """``pairs``: (anchor, positive) for every sentence, in corpus order (``positives: mined``: found by the
        trainer with the start model), instead of the text's own positives."""
        cfg = self.cfg
        if cfg.corpus == "disk":
            corpus = open_sharded_corpus(cfg, tokenizer, cache_dir=cfg.corpus_cache_dir, progress=progress)
            self.plan = BatchPlan(len(corpus), cfg.batch_size, cfg.seed)
            return corpus, describe(corpus.stats["text"], corpus.stats["tokens"])
        used = self.plan.used_indices(self.plan.total_steps(cfg))
        if pairs is not None:
            if len(pairs) != len(self.sentences):
                raise ValueError(f"{len(pairs)} pairs for {len(self.sentences)} sentences")
            memory = PairedCorpus(pairs, tokenizer, cfg.max_seq_length, used)
        elif cfg.positives in PAIR_KINDS:
            memory = PairedCorpus(self.sentences, tokenizer, cfg.max_seq_length, used)
        else:
            memory = TokenizedCorpus(self.sentences, tokenizer, cfg.max_seq_length, used)
        self.sentences = None  # the token ids are what the run keeps
        return memory, describe(self.text_stats, memory.stats)


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
