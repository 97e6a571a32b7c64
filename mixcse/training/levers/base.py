"""The lever interface, its registry and what a lever may read at setup (see the package docstring)."""
from __future__ import annotations

import sys
import time
from typing import Any, ClassVar

import numpy as np

from mixcse.models.sentence_encoder import SentenceEncoder


class Lever:
    name: ClassVar[str] = ""
    keys: ClassVar[dict[str, tuple[Any, Any]]] = {}
    renamed: ClassVar[dict[str, str]] = {}
    positives_value: ClassVar[str | None] = None  # the value of the ``positives`` key this lever answers to

    @classmethod
    def active(cls, cfg) -> bool:
        return False

    @classmethod
    def check(cls, cfg) -> None:
        pass

    def __init__(self, cfg):
        self.cfg = cfg

    def prepare(self, start: "StartModel") -> None:
        pass

    def pairs(self) -> list[tuple[str, str]] | None:
        return None

    def signals(self, indices: np.ndarray) -> dict:
        return {}

    def loss_term(self, z1, z2, signals: dict, objective, rows):
        return None

    def view(self, batch: dict, indices: np.ndarray, step: int) -> dict:
        return batch

    def report(self) -> dict | None:
        return None

    def has(self, hook: str) -> bool:
        """Whether this lever overrides ``hook`` (the trainer calls only the hooks a lever has)."""
        return getattr(type(self), hook) is not getattr(Lever, hook)


LEVERS: dict[str, type[Lever]] = {}
RESERVED: set[str] = set()  # the config's own keys (TrainConfig's fields), which no lever may declare


def _check_keys(cls: type[Lever]) -> None:
    taken = {key: other.name for other in LEVERS.values() if other.name != cls.name
             for key in (*other.keys, *other.renamed)}
    for key in (*cls.keys, *cls.renamed):
        if key in RESERVED:
            raise ValueError(f"lever {cls.name}: {key!r} is a config key of its own, not a lever's")
        if key in taken:
            raise ValueError(f"lever {cls.name}: {key!r} belongs to lever {taken[key]}")


def register_lever(cls: type[Lever]) -> type[Lever]:
    """Add a lever to the registry (a class decorator); its keys and old names must not be another lever's or a
    config field."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    _check_keys(cls)
    LEVERS[cls.name] = cls
    return cls


def reserve_keys(keys) -> None:
    """The config's own keys (config.py calls this once): no lever, registered or to come, may declare them."""
    RESERVED.update(keys)
    for cls in LEVERS.values():
        _check_keys(cls)


def unregister_lever(name: str) -> None:
    """Take a lever out of the registry (a lever registered for a while, e.g. in a test)."""
    LEVERS.pop(name, None)


def lever_keys() -> dict[str, tuple[Any, Any]]:
    """{recipe key: (type, default)} of every registered lever."""
    return {key: spec for cls in LEVERS.values() for key, spec in cls.keys.items()}


def renamed_keys() -> dict[str, str]:
    return {old: new for cls in LEVERS.values() for old, new in cls.renamed.items()}


def positives_values() -> tuple[str, ...]:
    """The values of ``positives``: dropout (the paper's), the text's own pairs, and those levers answer to."""
    from mixcse.data.documents import PAIR_KINDS

    return ("dropout", *PAIR_KINDS, *(cls.positives_value for cls in LEVERS.values() if cls.positives_value))


def active_levers(cfg) -> list[Lever]:
    """One instance of every lever ``cfg`` turns on, in registry order."""
    return [cls(cfg) for cls in LEVERS.values() if cls.active(cfg)]


class StartModel:
    """What a lever may read at setup: the start model (frozen weights, dropout off), its tokenizer, the training
    text (``sentences``: anchors, or (anchor, positive) pairs for the text's own pairs) and, computed once for every
    lever that asks, the start model's l2-normalised embeddings of the anchors (corpus order, training length)."""

    def __init__(self, cfg, encoder, tokenizer, corpus_loader, device, is_main: bool):
        self.cfg, self.encoder, self.tokenizer, self.device, self.is_main = cfg, encoder, tokenizer, device, is_main
        self._loader, self._embeddings, self.notes = corpus_loader, None, []

    @property
    def sentences(self) -> list:
        """The training text as the corpus reads it (``corpus: memory``)."""
        return self._loader.sentences

    @property
    def anchors(self) -> list[str]:
        return [a if isinstance(a, str) else a[0] for a in self.sentences]

    def embeddings(self) -> np.ndarray:
        if self._embeddings is None:
            t0 = time.perf_counter()
            inference = SentenceEncoder(self.encoder, self.tokenizer, max_seq_length=self.cfg.max_seq_length,
                                        device=self.device)
            anchors = self.anchors
            emb = inference.encode(anchors, batch_size=self.cfg.eval_batch_size)
            self._embeddings = emb / np.clip(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12, None)
            self.note(f"start model: embedded {len(anchors):,} training sentences in "
                      f"{time.perf_counter() - t0:.1f}s")
        return self._embeddings

    def note(self, line: str) -> None:
        self.notes.append(line)

    def print_notes(self) -> None:
        if self.is_main and self.notes:
            print("; ".join(self.notes), file=sys.stderr, flush=True)


