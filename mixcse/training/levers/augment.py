"""``positives: augment``: the second view of each training text is a text augmentation of it, drawn anew at every
step. Operators act on the text's whitespace tokens; each text gets one operator per step, drawn with the
probabilities of the ``augment`` mapping (what the probabilities leave to 1: the text unchanged):

    delete_span     delete a span of 1-2 consecutive tokens
    shuffle_span    shuffle a span of 2-4 consecutive tokens
    drop_token      drop each token with probability 0.2
    drop_length     drop every token of one length (a length the text has, drawn at random)
    strip_symbols   strip the characters that are not letters or digits from each token with probability 0.2

A text is never emptied: an operator that would leave no token leaves the text as it was. ``augment_views``: one
(view 2 is augmented, view 1 is the text) or both (two independent augmentations). ``augment_dropout`` (default
true): dropout stays on, as in SimCSE; false runs the training forward passes with the transformer's dropout off
(the pooler's MLP head stays in training mode), so that the views differ by the augmentation alone.
``augment_cutoff`` (default 0): the share of each augmented view's token positions removed inside the encoder
(cutoff): they leave the attention mask, so no other position attends to them and pooling skips them; the others
keep their position ids. The special tokens and one other token always stay.

Every draw comes from a generator seeded by (seed, step, the text's corpus index, view): the views are the same
whatever the number of processes, and a resumed run draws the views of the run that was cut off.
"""
from __future__ import annotations

import numpy as np
import torch

from mixcse.data.memory import pad_batch
from mixcse.errors import ConfigError
from mixcse.training.levers.base import Lever, register_lever

DEFAULT = {"delete_span": 0.3, "shuffle_span": 0.2, "drop_token": 0.2, "drop_length": 0.1, "strip_symbols": 0.1}


def delete_span(words: list[str], rng: np.random.Generator) -> list[str]:
    n = int(rng.integers(1, 3))
    start = int(rng.integers(0, max(len(words) - n, 0) + 1))
    return words[:start] + words[start + n:]


def shuffle_span(words: list[str], rng: np.random.Generator) -> list[str]:
    n = min(int(rng.integers(2, 5)), len(words))
    start = int(rng.integers(0, len(words) - n + 1))
    span = words[start:start + n]
    return words[:start] + [span[i] for i in rng.permutation(len(span))] + words[start + n:]


def drop_token(words: list[str], rng: np.random.Generator) -> list[str]:
    return [w for w, keep in zip(words, rng.random(len(words)) >= 0.2) if keep]


def drop_length(words: list[str], rng: np.random.Generator) -> list[str]:
    lengths = sorted({len(w) for w in words})
    gone = lengths[int(rng.integers(0, len(lengths)))]
    return [w for w in words if len(w) != gone]


def strip_symbols(words: list[str], rng: np.random.Generator) -> list[str]:
    out = []
    for word, strip in zip(words, rng.random(len(words)) < 0.2):
        word = "".join(c for c in word if c.isalnum()) if strip else word
        if word:
            out.append(word)
    return out


OPERATORS = {"delete_span": delete_span, "shuffle_span": shuffle_span, "drop_token": drop_token,
             "drop_length": drop_length, "strip_symbols": strip_symbols}


def augment_text(text: str, probabilities: dict[str, float], rng: np.random.Generator) -> tuple[str, str | None]:
    """(the augmented text, the operator drawn or None): one operator, drawn with ``probabilities``."""
    names = [name for name in OPERATORS if probabilities.get(name)]
    u, edge = rng.random(), 0.0
    for name in names:
        edge += probabilities[name]
        if u < edge:
            words = text.split()
            out = OPERATORS[name](words, rng) if words else words
            return (" ".join(out), name) if out else (text, name)
    return text, None


def text_rng(seed: int, step: int, index: int, view: int) -> np.random.Generator:
    return np.random.default_rng([seed, step, int(index), view])


def cutoff(batch: dict, share: float, seed: int, step: int, indices: np.ndarray, view: int) -> dict:
    """``batch`` with ``share`` of each row's inner token positions out of the attention mask."""
    mask = batch["attention_mask"].clone()
    for row, index in enumerate(indices):
        length = int(mask[row].sum())
        inner = np.arange(1, length - 1)  # not the first and last (special) tokens
        n = min(int(round(share * len(inner))), len(inner) - 1)
        if n > 0:
            rng = np.random.default_rng([seed, step, int(index), view, 1])
            mask[row, torch.as_tensor(rng.choice(inner, n, replace=False))] = 0
    return {**batch, "attention_mask": mask}


@register_lever
class Augment(Lever):
    name = "augment"
    positives_value = "augment"
    keys = {"augment": (dict[str, float] | None, None), "augment_views": (str, "one"),
            "augment_dropout": (bool, True), "augment_cutoff": (float, 0.0)}

    @classmethod
    def active(cls, cfg) -> bool:
        return cfg.positives == "augment"

    @classmethod
    def operator_probabilities(cls, cfg) -> dict[str, float]:
        return dict(DEFAULT if cfg.augment is None else cfg.augment)

    @classmethod
    def check(cls, cfg) -> None:
        changed = [k for k, (_, default) in cls.keys.items() if getattr(cfg, k) != default]
        if changed and cfg.positives != "augment":
            raise ConfigError(f"{', '.join(changed)} set, but positives is {cfg.positives}: set positives: augment")
        probabilities = cls.operator_probabilities(cfg)
        unknown = sorted(set(probabilities) - set(OPERATORS))
        if unknown:
            raise ConfigError(f"augment: unknown operator {unknown[0]!r}; the operators are {', '.join(OPERATORS)}")
        for name, p in probabilities.items():
            if not 0.0 <= p <= 1.0:
                raise ConfigError(f"augment: the probability of {name} must be in [0, 1], got {p}")
        if not any(probabilities.values()):
            raise ConfigError("augment: no operator has a probability above 0, so no text would change; give one, "
                              "or leave augment unset for the default")
        if sum(probabilities.values()) > 1.0 + 1e-9:
            raise ConfigError(f"augment: the probabilities add up to {sum(probabilities.values()):g}, more than 1 "
                              f"(each text gets one operator per step)")
        if cfg.augment_views not in ("one", "both"):
            raise ConfigError(f"augment_views must be one or both, got {cfg.augment_views!r}")
        if not 0.0 <= cfg.augment_cutoff < 1.0:
            raise ConfigError(f"augment_cutoff is a share of token positions, in [0, 1); got {cfg.augment_cutoff}")
        if (cfg.augment_cutoff or not cfg.augment_dropout) and cfg.compile:
            raise ConfigError("augment_cutoff and augment_dropout: false are not supported with compile: true")

    def prepare(self, start) -> None:
        self.texts, self.tokenizer, self.encoder = start.anchors, start.tokenizer, start.encoder
        self.probabilities = self.operator_probabilities(self.cfg)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        first = [(self.texts[i], *augment_text(self.texts[i], self.probabilities, text_rng(self.cfg.seed, 0, i, 2)))
                 for i in range(min(len(self.texts), 50))]
        self.sample = [[text, out, name] for text, out, name in first if name is not None][:3]
        start.note("positives augment: e.g. " + " | ".join(f"{a!r} -> {b!r} ({n})" for a, b, n in self.sample))

    def _views(self, indices: np.ndarray, step: int, view: int) -> dict:
        texts = [augment_text(self.texts[int(i)], self.probabilities, text_rng(self.cfg.seed, step, i, view))[0]
                 for i in indices]
        ids = self.tokenizer(texts, truncation=True, max_length=self.cfg.max_seq_length, add_special_tokens=True,
                             return_attention_mask=False, return_token_type_ids=False)["input_ids"]
        batch = pad_batch(ids, self.pad_id)
        if self.cfg.augment_cutoff:
            batch = cutoff(batch, self.cfg.augment_cutoff, self.cfg.seed, step, indices, view)
        return batch

    def view(self, batch: dict, indices: np.ndarray, step: int) -> dict:
        if not self.cfg.augment_dropout:  # dropout off in this step's forward passes (evaluation turns it on again);
            self.encoder.backbone.train(False)  # the encoder itself stays in training mode (its MLP head is used)
        anchors = self._views(indices, step, 1) if self.cfg.augment_views == "both" else {
            k: v for k, v in batch.items() if not k.startswith("positive_")}
        return anchors | {f"positive_{k}": v for k, v in self._views(indices, step, 2).items()}

    def report(self) -> dict:
        ops = ", ".join(f"{name} {p:g}" for name, p in self.probabilities.items())
        return {"operators": self.probabilities, "views": self.cfg.augment_views, "dropout": self.cfg.augment_dropout,
                "cutoff": self.cfg.augment_cutoff, "sample": self.sample,
                "text": f"the {'two views are' if self.cfg.augment_views == 'both' else 'second view is'} a text "
                        f"augmentation of each text, drawn every step ({ops})"
                        + ("" if self.cfg.augment_dropout else ", dropout off")
                        + (f", cutoff {self.cfg.augment_cutoff:g} of the positions" if self.cfg.augment_cutoff
                           else "")}
