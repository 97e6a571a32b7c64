"""What the start model says of the training text: the levers for adapting an encoder that is already good.

The start model (the weights a run begins from, frozen) embeds every training sentence once, before the first step
(``start_embeddings``: unit rows, in corpus order, dropout off, at the training length). From them:

    mine_mutual_neighbours(sentences, embeddings, threshold) -> (pairs, report)     ``positives: mined``
        each sentence whose nearest other sentence is also nearest to it, at cosine >= threshold and with other
        text, gets that sentence as its positive (the second view, still with its own dropout); every other
        sentence keeps its dropout view. The report (logged) says how many pairs and shows a few.
    StartModelSignals(embeddings, false_negative_threshold, distill)(indices) -> signals of one global batch
        ``exclude`` (N x N): pairs the start model puts at cosine >= false_negative_threshold, which are then
        neither negatives nor mixed for each other; ``teacher`` (N x d): the start model's embeddings, which
        ``distill_weight`` pulls the student's in-batch similarities toward (mixcse.losses.distillation_loss).

Mining compares every sentence with every other, in blocks: time grows with the square of the corpus (seconds for
10,000 sentences, minutes for 100,000).
"""
from __future__ import annotations

import sys
import time

import numpy as np
import torch

from mixcse.errors import DataError
from mixcse.models.sentence_encoder import SentenceEncoder

BLOCK = 2048  # rows of the similarity matrix at a time while mining


def start_embeddings(encoder, tokenizer, sentences: list[str], *, max_seq_length: int, batch_size: int,
                     device) -> np.ndarray:
    """The start model's l2-normalised embeddings of ``sentences`` (float32, input order), dropout off."""
    inference = SentenceEncoder(encoder, tokenizer, max_seq_length=max_seq_length, device=device)
    emb = inference.encode(sentences, batch_size=batch_size)
    return emb / np.clip(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12, None)


def nearest_neighbours(embeddings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every row of unit vectors, the index of its most similar other row and that cosine."""
    n = len(embeddings)
    best = np.empty(n, dtype=np.int64)
    score = np.empty(n, dtype=np.float32)
    for start in range(0, n, BLOCK):
        sim = embeddings[start:start + BLOCK] @ embeddings.T
        rows = np.arange(sim.shape[0])
        sim[rows, start + rows] = -np.inf  # not itself
        best[start:start + BLOCK] = sim.argmax(1)
        score[start:start + BLOCK] = sim[rows, best[start:start + BLOCK]]
    return best, score


def mine_mutual_neighbours(sentences: list[str], embeddings: np.ndarray, threshold: float, *,
                           sample: int = 3) -> tuple[list[tuple[str, str]], dict]:
    """(anchor, positive) for every sentence: its mutual nearest neighbour at cosine >= ``threshold`` (with other
    text), else itself. Raises ``DataError`` when no sentence has one."""
    if len(sentences) < 2:
        raise DataError("positives: mined needs at least two training sentences")
    best, score = nearest_neighbours(embeddings)
    mutual = (best[best] == np.arange(len(best))) & (score >= threshold)
    mutual &= np.asarray([sentences[i] != sentences[j] for i, j in enumerate(best)])
    if not mutual.any():
        pairs_seen = (best[best] == np.arange(len(best))) & np.asarray([sentences[i] != sentences[j]
                                                                        for i, j in enumerate(best)])
        closest = float(score[pairs_seen].max()) if pairs_seen.any() else float("nan")
        raise DataError(f"positives: mined found no mutual nearest neighbours at cosine >= {threshold:g} among "
                        f"{len(sentences):,} training sentences (the closest mutual pair: {closest:.3f}); lower "
                        f"mine_threshold or use positives: dropout")
    partner = np.where(mutual, best, np.arange(len(best)))
    pairs = [(sentences[i], sentences[j]) for i, j in enumerate(partner)]
    shown = [i for i in np.flatnonzero(mutual) if i < best[i]][:sample]
    report = {"sentences": len(sentences), "with_mined_positive": int(mutual.sum()), "threshold": threshold,
              "sample": [[sentences[i], sentences[best[i]], round(float(score[i]), 3)] for i in shown]}
    return pairs, report


class StartModelSignals:
    """The start model's signals for one global batch (``indices`` into the corpus; see the module docstring)."""

    def __init__(self, embeddings: np.ndarray, *, false_negative_threshold: float | None, distill: bool):
        self.embeddings = torch.from_numpy(np.ascontiguousarray(embeddings, dtype=np.float32))
        self.false_negative_threshold, self.distill = false_negative_threshold, distill

    def __call__(self, indices: np.ndarray) -> dict[str, torch.Tensor]:
        t = self.embeddings[torch.as_tensor(np.asarray(indices, dtype=np.int64))]
        out = {}
        if self.false_negative_threshold is not None:
            out["exclude"] = (t @ t.T) >= self.false_negative_threshold
        if self.distill:
            out["teacher"] = t
        return out


def start_model_levers(cfg, encoder, tokenizer, corpus_loader, device, is_main: bool):
    """(``positives: mined`` pairs, the per-batch signals of false negatives and distillation, the mining report)
    from the start model's embeddings of the training text (``corpus_loader.sentences``, read only here); (None,
    None, None) when no lever asks for them."""
    if not cfg.uses_start_embeddings():
        return None, None, None
    texts = corpus_loader.sentences
    anchors = [a for a, _ in texts] if cfg.positives in ("neighbours", "title") else texts
    t0 = time.perf_counter()
    emb = start_embeddings(encoder, tokenizer, anchors, max_seq_length=cfg.max_seq_length,
                           batch_size=cfg.eval_batch_size, device=device)
    note = f"start model: embedded {len(anchors):,} training sentences in {time.perf_counter() - t0:.1f}s"
    pairs = report = None
    if cfg.positives == "mined":
        pairs, report = mine_mutual_neighbours(anchors, emb, cfg.mine_threshold)
        note += (f"; positives mined: {report['with_mined_positive']:,} of {report['sentences']:,} sentences "
                 f"have a mutual nearest neighbour at cosine >= {cfg.mine_threshold:g}, e.g. "
                 + " | ".join(f"{a!r} ~ {b!r} ({c:.2f})" for a, b, c in report["sample"]))
    if is_main:
        print(note, file=sys.stderr, flush=True)
    signals = None
    if cfg.false_negative_threshold is not None or cfg.distill_weight:
        signals = StartModelSignals(emb, false_negative_threshold=cfg.false_negative_threshold,
                                    distill=bool(cfg.distill_weight))
    return pairs, signals, report
