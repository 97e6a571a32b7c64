"""Training text tokenised once into shards on disk: corpora larger than RAM (``corpus: disk``).

Interface:
    open_sharded_corpus(cfg, tokenizer, *, cache_dir=None, workers=None, progress=True) -> ShardedCorpus
        The corpus ``cfg.train_file`` makes under ``cfg``'s reading options (``text_column``, ``segment``,
        ``min_words``, ``dedupe``, ``max_sentences``) and ``tokenizer`` at ``cfg.max_seq_length``. Built on first use
        into ``cache_dir/<key>``, where key = a hash of (the file's content, the tokenizer, the max length, the
        reading options); a later run with the same key opens it at once.
    ShardedCorpus(directory): a ``data.Corpus`` (``len``, ``batch(indices)``) whose token ids stay on disk (read
        per batch with positioned reads; see the class for why not mmap);
        ``.stats`` = {"text": Segments.stats, "tokens": TokenizedCorpus.stats-like} of the build.
    cache_root(cache_dir=None) -> Path: ``cache_dir``, else $MIXCSE_CACHE/corpus, else ~/.cache/mixcse/corpus.

Layout of an entry: ``shard-NNNNN.ids`` (uint32 token ids, back to back), ``shard-NNNNN.offsets`` (int64, one more
than the shard's sequences; both raw little-endian arrays, ``numpy.fromfile`` / ``numpy.memmap`` read them),
``rows.npy`` (kept sequence numbers, when dedupe dropped any) and ``meta.json``. An entry is built in a temporary
folder and renamed into place when complete, so a killed build leaves no entry.

Memory: reading streams (``documents.Segments``), worker processes tokenise chunks of 8,192 segments with a bounded
number in flight, and the writer appends to the current shard; nothing grows with the corpus but the shard
offsets being written (8 bytes a sequence, up to ``SHARD_SEQUENCES`` at a time). Dedupe is by 8-byte BLAKE2b
digests written beside the ids and resolved after the pass with one ``numpy.unique`` (16 bytes a segment, briefly).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch

from mixcse.data.documents import Segments
from mixcse.data.memory import pad_batch
from mixcse.errors import DataError
from mixcse.utils.files import file_digest
from mixcse.utils.progress import Progress

FORMAT_VERSION = 1
SHARD_SEQUENCES = 1 << 20
CHUNK = 8192


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    if cache_dir:
        return Path(cache_dir)
    if os.environ.get("MIXCSE_CACHE"):
        return Path(os.environ["MIXCSE_CACHE"]) / "corpus"
    return Path.home() / ".cache" / "mixcse" / "corpus"


def content_digest(path: Path) -> str:
    """The training file's part of a cache key (BLAKE2b, 16 bytes: keys of existing caches stay valid)."""
    return file_digest(path, algorithm="blake2b", digest_size=16)


def tokenizer_digest(tokenizer) -> str:
    """What decides the ids: a fast tokenizer's whole serialised pipeline, else its class and vocabulary."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else type(tokenizer).__name__ + json.dumps(
        sorted(tokenizer.get_vocab().items()))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


# ------------------------------------------------------------------------------------------- workers
_WORKER: dict = {}


def _init_worker(tokenizer, max_seq_length: int, dedupe: bool) -> None:
    _WORKER.update(tokenizer=tokenizer, max_seq_length=max_seq_length, dedupe=dedupe)


def _tokenise(texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(ids back to back as uint32, lengths, truncated flags or None when the tokenizer cannot tell, 8-byte digests
    or None) of one chunk."""
    tokenizer, max_len = _WORKER["tokenizer"], _WORKER["max_seq_length"]
    encoded = tokenizer(texts, truncation=True, max_length=max_len, add_special_tokens=True,
                        return_attention_mask=False, return_token_type_ids=False)
    ids = encoded["input_ids"]
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter((t for x in ids for t in x), dtype=np.uint32, count=int(lengths.sum()))
    truncated = None
    if encoded.encodings is not None:  # a fast tokenizer keeps what truncation cut off
        truncated = np.fromiter((bool(e.overflowing) for e in encoded.encodings), dtype=np.bool_, count=len(ids))
    digests = None
    if _WORKER["dedupe"]:
        digests = np.fromiter((int.from_bytes(hashlib.blake2b(t.encode("utf-8"), digest_size=8).digest(), "little")
                               for t in texts), dtype=np.uint64, count=len(texts))
    return flat, lengths, truncated, digests


def _chunks(items: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _tokenised(chunks: Iterator[list[str]], workers: int, init_args: tuple) -> Iterator[tuple]:
    """Results in order; at most 2 x ``workers`` chunks in flight, so reading never runs ahead of writing."""
    if workers <= 1:
        _init_worker(*init_args)
        yield from map(_tokenise, chunks)
        return
    with ProcessPoolExecutor(workers, initializer=_init_worker, initargs=init_args) as pool:  # fork: no re-import
        pending: deque = deque()
        for chunk in chunks:
            pending.append(pool.submit(_tokenise, chunk))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


# --------------------------------------------------------------------------------------------- build
class _ShardWriter:
    def __init__(self, directory: Path, dedupe: bool):
        self.directory, self.count, self.shard = directory, 0, 0
        self._lengths: list[np.ndarray] = []
        self._in_shard = 0
        self._ids = None
        self._digests = open(directory / "digests.u64", "wb") if dedupe else None
        self._flags = open(directory / "truncated.u8", "wb") if dedupe else None

    def add(self, flat: np.ndarray, lengths: np.ndarray, truncated: np.ndarray | None,
            digests: np.ndarray | None) -> None:
        start = 0
        while start < len(lengths):  # a chunk may straddle two shards
            if self._ids is None:
                self._ids = open(self.directory / f"shard-{self.shard:05d}.ids", "wb")
            take = min(len(lengths) - start, SHARD_SEQUENCES - self._in_shard)
            part = lengths[start:start + take]
            begin = int(lengths[:start].sum())
            flat[begin:begin + int(part.sum())].tofile(self._ids)
            self._lengths.append(part)
            self._in_shard += take
            start += take
            if self._in_shard == SHARD_SEQUENCES:
                self._close_shard()
        if self._digests is not None:
            digests.tofile(self._digests)
            (truncated if truncated is not None else np.zeros(len(lengths), np.bool_)).tofile(self._flags)
        self.count += len(lengths)

    def _close_shard(self) -> None:
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        offsets.tofile(self.directory / f"shard-{self.shard:05d}.offsets")
        self._ids.close()
        self._ids, self._lengths, self._in_shard = None, [], 0
        self.shard += 1

    def close(self) -> None:
        if self._ids is not None:
            self._close_shard()
        if self._digests is not None:
            self._digests.close()
            self._flags.close()


def build_shards(segments: Segments, tokenizer, max_seq_length: int, directory: Path, *, workers: int = 1,
                 progress: bool = True) -> None:
    """Tokenise ``segments`` into a new entry ``directory`` (which must not exist)."""
    stats = segments.stats
    dedupe = bool(stats["dedupe"])
    limit = segments.max_sentences
    if dedupe:  # resolved after the pass, from digests: read everything, drop duplicates, then keep the first N
        segments.stats["dedupe"], segments.max_sentences = False, None
    work = directory.with_name(directory.name + f".building-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        writer = _ShardWriter(work, dedupe)
        tokens, truncated, known = 0, 0, True
        bar = Progress(None, "tokenise", "segments", enabled=progress)
        for flat, lengths, cut, digests in _tokenised(_chunks(segments, CHUNK), workers,
                                                      (tokenizer, max_seq_length, dedupe)):
            writer.add(flat, lengths, cut, digests)
            tokens += int(lengths.sum())
            known = known and cut is not None
            truncated += int(cut.sum()) if cut is not None else 0
            bar.update(len(lengths))
        writer.close()
        bar.close()
        kept = writer.count  # the sequences a run draws from
        if dedupe:
            stats["dedupe"] = True
            _, first = np.unique(np.fromfile(work / "digests.u64", dtype=np.uint64), return_index=True)
            rows = np.sort(first)[:limit]
            stats["dropped_duplicates"] = writer.count - len(first)
            del first
            lengths = np.concatenate([np.diff(np.fromfile(work / f"shard-{i:05d}.offsets", dtype=np.int64))
                                      for i in range(writer.shard)])
            tokens = int(lengths[rows].sum())
            truncated = int(np.fromfile(work / "truncated.u8", dtype=np.bool_)[rows].sum())
            del lengths
            (work / "digests.u64").unlink()
            (work / "truncated.u8").unlink()
            kept = stats["segments"] = len(rows)
            if kept < writer.count:
                np.save(work / "rows.npy", rows.astype(np.int64))
        token_stats = {"sequences": kept, "tokens": tokens, "max_seq_length": max_seq_length,
                       "truncated": truncated if known else None,
                       "truncated_share": truncated / max(kept, 1) if known else None}
        meta = {"format_version": FORMAT_VERSION, "sequences": writer.count, "shards": writer.shard,
                "text": stats, "tokens": token_stats}
        (work / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        try:
            work.rename(directory)
        except OSError:
            if not (directory / "meta.json").is_file():  # not another process's complete entry: a real failure
                raise
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


# ---------------------------------------------------------------------------------------------- read
class ShardedCorpus:
    """A built entry as a ``data.Corpus``: token ids stay on disk and each batch reads its sequences with
    positioned reads (``os.pread``: two offsets and the ids of each sequence).

    Not ``mmap``: the kernel maps tens of kilobytes around every random page fault into the process (fault-around),
    so a memory-mapped corpus's resident size grows with every batch (by 240 MB over 20 batches of 64 at 4M
    sentences, measured) although the pages are only cache; positioned reads leave the process's memory flat.
    """

    def __init__(self, directory: str | os.PathLike, pad_id: int = 0):
        directory = Path(directory)
        meta = json.loads((directory / "meta.json").read_text())
        if meta.get("format_version") != FORMAT_VERSION:
            raise DataError(f"{directory}: corpus cache of format {meta.get('format_version')}, this mixcse reads "
                            f"{FORMAT_VERSION}; delete it to rebuild")
        self.directory, self.pad_id = directory, pad_id
        self.stats = {"text": meta["text"], "tokens": meta["tokens"]}
        shards = range(meta["shards"])
        self._ids, self._offsets = [], []  # one by one: after a failed open, __del__ closes the opened ones
        for i in shards:
            self._ids.append(os.open(directory / f"shard-{i:05d}.ids", os.O_RDONLY))
            self._offsets.append(os.open(directory / f"shard-{i:05d}.offsets", os.O_RDONLY))
        sizes = [os.fstat(fd).st_size // 8 - 1 for fd in self._offsets]
        self._starts = np.cumsum([0] + sizes)
        rows = directory / "rows.npy"
        self._rows = np.load(rows) if rows.exists() else None  # 8 bytes per kept sequence, only after dedupe
        self._size = len(self._rows) if self._rows is not None else int(self._starts[-1])

    def __len__(self) -> int:
        return self._size

    def __del__(self) -> None:
        for fd in getattr(self, "_ids", []) + getattr(self, "_offsets", []):
            os.close(fd)

    def sequence(self, index: int) -> np.ndarray:
        row = int(self._rows[index]) if self._rows is not None else int(index)
        shard = int(np.searchsorted(self._starts, row, side="right")) - 1
        local = row - int(self._starts[shard])
        start, end = np.frombuffer(os.pread(self._offsets[shard], 16, 8 * local), dtype=np.int64)
        return np.frombuffer(os.pread(self._ids[shard], 4 * int(end - start), 4 * int(start)), dtype=np.uint32)

    def batch(self, indices: np.ndarray) -> dict[str, torch.Tensor]:
        """Padded to the batch's own longest sequence (as ``TokenizedCorpus.batch``)."""
        return pad_batch([self.sequence(int(i)) for i in indices], self.pad_id)


def open_sharded_corpus(cfg, tokenizer, *, cache_dir: str | os.PathLike | None = None, workers: int | None = None,
                        progress: bool = True) -> ShardedCorpus:
    segments = Segments(cfg.train_file, text_column=cfg.text_column, segment=cfg.segment, min_words=cfg.min_words,
                        dedupe=cfg.dedupe, max_sentences=cfg.max_sentences)
    options = {k: segments.stats[k] for k in ("format", "segment", "min_words", "dedupe")}
    key_parts = {"version": FORMAT_VERSION, "file": content_digest(segments.path),
                 "tokenizer": tokenizer_digest(tokenizer),
                 "max_seq_length": cfg.max_seq_length, "text_column": cfg.text_column,
                 "max_sentences": cfg.max_sentences, **options}
    key = hashlib.blake2b(json.dumps(key_parts, sort_keys=True).encode(), digest_size=12).hexdigest()
    directory = cache_root(cache_dir) / key
    if not (directory / "meta.json").is_file():
        workers = workers or min(8, os.cpu_count() or 1)
        build_shards(segments, tokenizer, cfg.max_seq_length, directory, workers=workers, progress=progress)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    corpus = ShardedCorpus(directory, pad_id)
    corpus.stats["text"]["file"] = str(segments.path)  # the entry may have been built from a copy elsewhere
    return corpus
