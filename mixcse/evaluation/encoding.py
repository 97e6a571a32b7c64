"""Turning sentences into embeddings, optionally cached on disk.

SentEval encodes every task's batches as they come, so a sentence shared by both sides of several pairs is
encoded many times. `encode_units` (what `evaluate` uses) encodes each task's distinct sentences once, in that
task's own length-sorted batches, so that a task's score does not depend on what else is evaluated;
`encode_unique` encodes each distinct sentence of any stream once. The caches make a second evaluation of the
same weights free.
"""
from __future__ import annotations

import hashlib
import inspect
import os
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from mixcse.utils.files import atomic_path
from mixcse.utils.progress import Progress

Encoder = Any  # an object with .encode(list[str], batch_size=...) or a callable list[str] -> array


def resolve_encoder(model: Any, pooler: str | None = None, precision: str = "fp32", backend: str = "torch") -> Encoder:
    """A path/name becomes a `SentenceEncoder` (at `precision`, on `backend`: torch or onnx); encoders and callables
    pass through unchanged."""
    if isinstance(model, (str, os.PathLike)):
        if backend == "onnx":  # no torch import on this path
            from mixcse.models.onnx_backend import OnnxSentenceEncoder

            return OnnxSentenceEncoder.load(model, pooler=pooler, precision=precision)
        from mixcse.models.sentence_encoder import SentenceEncoder  # lazy: heavy import, and only needed for paths

        return SentenceEncoder.load(model, pooler=pooler, precision=precision, backend=backend)
    if hasattr(model, "encode") or callable(model):
        return model
    raise TypeError(f"not an encoder: {type(model).__name__} (need .encode(list[str]) or a callable)")


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


def _key(sentence: str) -> bytes:
    return hashlib.sha256(sentence.encode("utf-8")).digest()[:16]


class EmbeddingCache:
    """Embeddings on disk, one folder per encoder fingerprint, append-only shards.

    Each run that encodes new sentences writes one new shard (temp file + rename), so a crash never leaves a
    half-written file behind and two concurrent runs cannot corrupt each other (duplicates are harmless)."""

    def __init__(self, cache_dir: str | os.PathLike, fingerprint: str):
        self.fingerprint = fingerprint
        digest = hashlib.sha256(fingerprint.encode("utf-8")).hexdigest()[:20]
        self.dir = Path(cache_dir) / digest
        self._index: dict[bytes, tuple[int, int]] | None = None
        self._shards: list[np.ndarray] = []

    def _load(self) -> None:
        if self._index is not None:
            return
        self._index, self._shards = {}, []
        if not self.dir.is_dir():
            return
        for path in sorted(self.dir.glob("shard-*.npz")):
            try:
                with np.load(path) as z:
                    keys, emb = z["keys"], z["emb"]
            except Exception:  # an unreadable shard is ignored, not fatal: it is only a cache
                continue
            if len(keys) != len(emb) or (self._shards and emb.shape[1] != self._shards[0].shape[1]):
                continue
            s = len(self._shards)
            self._shards.append(emb)
            raw = np.ascontiguousarray(keys, dtype=np.uint8).tobytes()
            for row in range(len(keys)):
                self._index.setdefault(raw[16 * row:16 * row + 16], (s, row))

    def lookup(self, sentences: list[str]) -> tuple[np.ndarray | None, list[int]]:
        """Rows for the cached sentences (None if nothing cached) and the positions still missing."""
        self._load()
        assert self._index is not None
        hits = [self._index.get(_key(s)) for s in sentences]
        missing = [i for i, h in enumerate(hits) if h is None]
        if len(missing) == len(sentences):
            return None, missing
        dim = self._shards[0].shape[1]
        out = np.zeros((len(sentences), dim), dtype=np.float32)
        for i, h in enumerate(hits):
            if h is not None:
                out[i] = self._shards[h[0]][h[1]]
        return out, missing

    def add(self, sentences: list[str], emb: np.ndarray) -> None:
        if not sentences:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        fp_file = self.dir / "fingerprint.txt"
        if not fp_file.exists():
            fp_file.write_text(self.fingerprint + "\n", encoding="utf-8")
        keys = np.frombuffer(b"".join(_key(s) for s in sentences), dtype=np.uint8).reshape(-1, 16)
        with atomic_path(self.dir / f"shard-{uuid.uuid4().hex}.npz") as tmp, open(tmp, "wb") as fh:
            np.savez(fh, keys=keys, emb=np.asarray(emb, dtype=np.float32))
        self._index = None  # reload lazily next time


def _takes(fn: Callable, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def encode_unique(encoder: Encoder, sentences: Iterable[str], *, batch_size: int = 64,
                  cache_dir: str | os.PathLike | None = None,
                  show_progress: bool = False) -> tuple[dict[str, int], np.ndarray, dict]:
    """Embed each distinct sentence once. Returns (sentence -> row, matrix, stats)."""
    unique = list(dict.fromkeys(sentences))
    index = {s: i for i, s in enumerate(unique)}
    stats = {"distinct_sentences": len(unique), "cache_hits": 0, "encoded": len(unique)}
    fp = encoder_fingerprint(encoder)
    cache = EmbeddingCache(cache_dir, fp) if (cache_dir is not None and fp) else None
    if cache is None:
        return index, encode_raw(encoder, unique, batch_size, show_progress), stats
    cached, missing = cache.lookup(unique)
    if missing:
        todo = [unique[i] for i in missing]
        fresh = encode_raw(encoder, todo, batch_size, show_progress)
        cache.add(todo, fresh)
        if cached is None or cached.shape[1] != fresh.shape[1]:
            cached = np.zeros((len(unique), fresh.shape[1]), dtype=np.float32) if cached is None else cached
            if cached.shape[1] != fresh.shape[1]:
                raise ValueError("cached embeddings have a different dimension than the encoder's output")
        cached[missing] = fresh
    stats.update(cache_hits=len(unique) - len(missing), encoded=len(missing))
    return index, cached, stats


def _unit_key(sentences: list[str], batch_size: int) -> str:
    h = hashlib.sha256(f"batch_size={batch_size}\0".encode())
    for s in sentences:
        h.update(_key(s))
    return h.hexdigest()[:24]


def encode_units(encoder: Encoder, units: dict[str, list[str]], *, batch_size: int = 64,
                 cache_dir: str | os.PathLike | None = None, show_progress: bool = False,
                 reference: bool = False) -> tuple[dict[str, tuple[dict[str, int], np.ndarray]], dict]:
    """Embed each unit (one task's sentences) on its own. Returns ({unit: (sentence -> row, matrix)}, stats).

    A sentence's embedding moves in the last float bits with its padded width, and a probe can turn those bits
    into a different choice of L2 and a different test score. So each unit's distinct sentences get exactly the
    embeddings of their own length-sorted batches, and a task's embeddings depend only on the model, the task's
    sentences and `batch_size` -- never on which other tasks are evaluated with it, nor on what a cache already
    held. Cached per (fingerprint, batch_size, unit's sentence list), whole units only.

    How they are computed: a CPU `SentenceEncoder` whose rows are independent of their batch-mates (checked on
    the first unit) computes each (sentence, padded width) that any unit needs once, all units together, on
    parallel threads (`SentenceEncoder.encode_units`, the same bits); other encoders, or `reference=True`,
    encode unit by unit."""
    out: dict[str, tuple[dict[str, int], np.ndarray]] = {}
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
            out[name] = ({s: i for i, s in enumerate(unique)}, emb)
    lists = {name: unique for name, (unique, _) in pending.items()}
    if lists and not reference and _shares_rows(encoder, next(iter(lists.values())), batch_size):
        fresh = encoder.encode_units(lists, batch_size=batch_size, show_progress=show_progress)
        stats["computation"] = "each (sentence, padded width) once across tasks, parallel threads"
    else:
        fresh = {name: encode_raw(encoder, unique, batch_size, show_progress=show_progress)
                 for name, unique in lists.items()}
        stats["computation"] = "task by task" if lists else "all from the cache"
    for name, (unique, path) in pending.items():
        if path is not None:
            _write_unit(path, fresh[name], fp)
        out[name] = ({s: i for i, s in enumerate(unique)}, fresh[name])
    return {name: out[name] for name in units}, stats


def _shares_rows(encoder: Encoder, sample: list[str], batch_size: int) -> bool:
    """Whether `encoder` can compute several units' rows together with the same bits (see encode_units)."""
    device = getattr(encoder, "device", None)
    return (hasattr(encoder, "encode_units") and hasattr(encoder, "rows_are_independent")
            and getattr(device, "type", None) == "cpu" and encoder.rows_are_independent(sample, batch_size))


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


def gather(index: dict[str, int], emb: np.ndarray, sentences: list[str]) -> np.ndarray:
    return emb[np.fromiter((index[s] for s in sentences), dtype=np.int64, count=len(sentences))]


EncodeFn = Callable[[list[str]], np.ndarray]
