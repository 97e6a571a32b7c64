"""``positives``: the second view of each training sentence (the paper's is the sentence again, under dropout).

    dropout     the sentence again; dropout makes the two views differ (the paper's, the default)
    neighbours  the next sentence of its document      } read from the training file by the corpus
    title       a document's title as anchor, its text  } (mixcse/data/documents.py read_positive_pairs)
    mined       its mutual nearest neighbour by the start model at cosine >= ``mine_threshold`` (with other text);
                the other sentences keep their dropout view. Mining compares every sentence with every other, in
                blocks: time grows with the square of the corpus (seconds for 10,000 sentences, minutes for 100,000).
    augment     a text augmentation of it (augment.py)
"""
from __future__ import annotations

import numpy as np

from mixcse.errors import ConfigError, DataError
from mixcse.training.levers.base import Lever, positives_values, register_lever

BLOCK = 2048  # rows of the similarity matrix at a time while mining


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


TEXT = {"neighbours": "the second view of each sentence is the next sentence of its document",
        "title": "the second view of each document's title is its text"}


@register_lever
class Positives(Lever):
    name = "positives"
    positives_value = "mined"
    keys = {"positives": (str, "dropout"), "mine_threshold": (float, 0.9)}

    @classmethod
    def active(cls, cfg) -> bool:
        return cfg.positives in ("mined", *TEXT)

    @classmethod
    def check(cls, cfg) -> None:
        values = positives_values()
        if cfg.positives not in values:
            raise ConfigError(f"positives must be one of {', '.join(values)}, got {cfg.positives!r}")
        if cfg.positives != "dropout" and cfg.corpus == "disk":
            raise ConfigError(f"positives {cfg.positives} needs corpus: memory")
        if not -1.0 <= cfg.mine_threshold <= 1.0:
            raise ConfigError(f"config key 'mine_threshold' is a cosine similarity, in [-1, 1]; got "
                              f"{cfg.mine_threshold}")

    def prepare(self, start) -> None:
        self._pairs, self._report = None, {"kind": self.cfg.positives, "text": TEXT.get(self.cfg.positives)}
        if self.cfg.positives != "mined":
            return
        threshold = self.cfg.mine_threshold
        self._pairs, mined = mine_mutual_neighbours(start.anchors, start.embeddings(), threshold)
        start.note(f"positives mined: {mined['with_mined_positive']:,} of {mined['sentences']:,} sentences have a "
                   f"mutual nearest neighbour at cosine >= {threshold:g}, e.g. "
                   + " | ".join(f"{a!r} ~ {b!r} ({c:.2f})" for a, b, c in mined["sample"]))
        self._report = {"kind": "mined", **mined,
                        "text": f"{mined['with_mined_positive']:,} of {mined['sentences']:,} training sentences had "
                                f"their mutual nearest neighbour by the start model (cosine >= {threshold:g}) as "
                                f"positive; the others their dropout view"}

    def pairs(self) -> list[tuple[str, str]] | None:
        return self._pairs

    def report(self) -> dict | None:
        return self._report
