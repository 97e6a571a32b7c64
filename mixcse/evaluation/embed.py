"""The one way evaluation turns sentences into embeddings: each distinct sentence once, optionally cached on disk.

    embed_units(encoder, {unit: sentences}, batch_size=64, cache_dir=None) -> ({unit: Embeddings}, stats)
    Embeddings(row, matrix)(sentences) -> the rows of those sentences (picklable: a probe's worker process gets it)
    encode_raw(encoder, sentences, batch_size)   one list, in input order: the encoder's own ``encode`` or, for a
                                                 plain callable, length-sorted batches

A *unit* is what one evaluator needs (a task's sentences, a pair file's, a retrieval split's queries): each unit's
distinct sentences are embedded in their own length-sorted batches, so that a task's score depends only on the
model, its sentences and the batch size -- never on which other tasks are evaluated with it, nor on what a cache
already held. Every evaluator, in ``mixcse eval`` and in checkpoint selection alike, goes through ``embed_units``.
"""
from __future__ import annotations

import hashlib
import inspect
import os
import weakref
from pathlib import Path
from typing import Any, Callable

import numpy as np

from mixcse.utils.files import atomic_path
from mixcse.utils.progress import Progress

Encoder = Any  # an object with .encode(list[str], batch_size=...) or a callable list[str] -> array


def encoder_fingerprint(encoder: Encoder) -> str | None:
    fp = getattr(encoder, "fingerprint", None)
    return fp if isinstance(fp, str) and fp else None


def describe_encoder(encoder: Encoder) -> str:
    fp = encoder_fingerprint(encoder)
    name = getattr(encoder, "__qualname__", None) or type(encoder).__qualname__
    return f"{name} ({fp})" if fp else name


def _length_order(sentences: list[str]) -> np.ndarray:
    """Longest first, so that padding is minimal and an out-of-memory batch shows up at once."""
    return np.asarray(sorted(range(len(sentences)), key=lambda i: (-len(sentences[i].split()),
                                                                   -len(sentences[i]), i)), dtype=np.int64)


def _as_matrix(out: Any, n: int) -> np.ndarray:
    if hasattr(out, "detach"):  # a torch tensor
        out = out.detach().float().cpu().numpy()
    arr = np.asarray(out, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[0] != n:
        raise ValueError(f"encoder returned shape {arr.shape} for {n} sentences; expected ({n}, dim)")
    return arr


def _takes(fn: Callable, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def encode_raw(encoder: Encoder, sentences: list[str], batch_size: int = 64,
               show_progress: bool = False) -> np.ndarray:
    """Embed `sentences` (already deduplicated) in input order.

    An object with `.encode` gets the whole list in one call (it sorts and batches itself, and shows its own
    progress when its `encode` takes `show_progress`); a plain callable is fed length-sorted batches of
    `batch_size`, as a model would want. `show_progress`: mixcse.utils.progress.Progress on stderr."""
    if not sentences:
        return np.zeros((0, 0), dtype=np.float32)
    if hasattr(encoder, "encode"):
        kwargs = {"show_progress": True} if show_progress and _takes(encoder.encode, "show_progress") else {}
        return _as_matrix(encoder.encode(list(sentences), batch_size=batch_size, **kwargs), len(sentences))
    order = _length_order(sentences)
    parts = []
    with Progress(len(order), "encode", "sentences", enabled=show_progress) as progress:
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            batch = [sentences[i] for i in idx]
            parts.append(_as_matrix(encoder(batch), len(batch)))
            progress.update(len(batch))
    sorted_emb = np.concatenate(parts, axis=0)
    out = np.empty_like(sorted_emb)
    out[order] = sorted_emb
    return out


class Embeddings:
    """The embeddings of one unit's distinct sentences; ``embeddings(sentences)`` gathers their rows."""

    def __init__(self, row: dict[str, int], matrix: np.ndarray):
        self.row = row
        self.matrix = matrix

    def __call__(self, sentences: list[str]) -> np.ndarray:
        return self.matrix[np.fromiter((self.row[s] for s in sentences), dtype=np.int64, count=len(sentences))]


def _key(sentence: str) -> bytes:
    return hashlib.sha256(sentence.encode("utf-8")).digest()[:16]


def _unit_key(sentences: list[str], batch_size: int) -> str:
    h = hashlib.sha256(f"batch_size={batch_size}\0".encode())
    for s in sentences:
        h.update(_key(s))
    return h.hexdigest()[:24]


def embed_units(encoder: Encoder, units: dict[str, list[str]], *, batch_size: int = 64,
                cache_dir: str | os.PathLike | None = None,
                show_progress: bool = False) -> tuple[dict[str, Embeddings], dict]:
    """Embed each unit's distinct sentences on its own. Returns ({unit: Embeddings}, stats).

    A sentence's embedding moves in the last float bits with its padded width, and a probe can turn those bits
    into a different choice of L2 and a different test score; so each unit gets exactly the embeddings of its own
    length-sorted batches. Cached per (encoder fingerprint, batch_size, the unit's sentence list), whole units only.

    How they are computed: a CPU `SentenceEncoder` whose rows are independent of their batch-mates (checked on the
    first unit) computes each (sentence, padded width) that any unit needs once, all units together, on parallel
    threads (`SentenceEncoder.encode_units`, the same bits); other encoders encode unit by unit."""
    out: dict[str, Embeddings] = {}
    fp = encoder_fingerprint(encoder)
    folder = (Path(cache_dir) / hashlib.sha256(fp.encode("utf-8")).hexdigest()[:20]) if (cache_dir and fp) else None
    stats = {"units": len(units), "distinct_sentences": len({s for ss in units.values() for s in ss}),
             "encoded": 0, "cache_hits": 0, "batching": "each task's distinct sentences in their own length-sorted "
                                                        f"batches of {batch_size}"}
    pending: dict[str, tuple[list[str], Path | None]] = {}
    for name, sentences in units.items():
        unique = list(dict.fromkeys(sentences))
        path = None if folder is None else folder / f"unit-{_unit_key(unique, batch_size)}.npy"
        emb = _read_unit(path, len(unique))
        if emb is None:
            pending[name] = (unique, path)
            stats["encoded"] += len(unique)
        else:
            stats["cache_hits"] += len(unique)
            out[name] = Embeddings({s: i for i, s in enumerate(unique)}, emb)
    lists = {name: unique for name, (unique, _) in pending.items()}
    if lists and _shares_rows(encoder, next(iter(lists.values())), batch_size):
        fresh = encoder.encode_units(lists, batch_size=batch_size, show_progress=show_progress)
        stats["computation"] = "each (sentence, padded width) once across tasks, parallel threads"
    else:
        fresh = {name: encode_raw(encoder, unique, batch_size, show_progress=show_progress)
                 for name, unique in lists.items()}
        stats["computation"] = "task by task" if lists else "all from the cache"
    for name, (unique, path) in pending.items():
        if path is not None:
            _write_unit(path, fresh[name], fp)
        out[name] = Embeddings({s: i for i, s in enumerate(unique)}, fresh[name])
    return {name: out[name] for name in units}, stats


_ROWS_CHECKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # encoder -> {batch_size: verdict}
ROWS_SAMPLE = 16  # sentences the check runs on: it asks the kernels, not the data


def _shares_rows(encoder: Encoder, sample: list[str], batch_size: int) -> bool:
    """Whether `encoder` can compute several units' rows together with the same bits (see embed_units); asked once
    per encoder object and batch size (a training run scores the same object at every evaluation)."""
    device = getattr(encoder, "device", None)
    if not (hasattr(encoder, "encode_units") and hasattr(encoder, "rows_are_independent")
            and getattr(device, "type", None) == "cpu"):
        return False
    try:
        verdicts = _ROWS_CHECKED.setdefault(encoder, {})
    except TypeError:  # not weak-referenceable: ask every time
        verdicts = {}
    if batch_size not in verdicts:
        verdicts[batch_size] = bool(encoder.rows_are_independent(sample[:ROWS_SAMPLE], batch_size))
    return verdicts[batch_size]


def _read_unit(path: Path | None, n: int) -> np.ndarray | None:
    if path is None or not path.is_file():
        return None
    try:
        emb = np.load(path)
    except Exception:  # an unreadable entry is only a cache miss
        return None
    return emb if emb.ndim == 2 and emb.shape[0] == n and emb.dtype == np.float32 else None


def _write_unit(path: Path, emb: np.ndarray, fingerprint: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fp_file = path.parent / "fingerprint.txt"
    if not fp_file.exists():
        fp_file.write_text(fingerprint + "\n", encoding="utf-8")
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, np.asarray(emb, dtype=np.float32))
