"""Training text from a file of documents or of lines, cut into the segments a run trains on.

Interface:
    read_training_text(cfg) -> tuple[list[str], dict]
        The segments of ``cfg.train_file`` under ``cfg``'s ``text_column``, ``segment``, ``min_words``, ``dedupe``
        and ``max_sentences``, and the stats of reading them (see ``read_segments``). What the trainer calls.
    read_segments(path, *, text_column=None, segment=None, min_words=None, dedupe=None, max_sentences=None)
        -> tuple[list[str], dict]
        stats: file, format, segment, min_words, dedupe, documents, segments, dropped_short, dropped_duplicates.
    read_positive_pairs(path, *, positives, ...) -> (list of (anchor, positive), stats): positives beyond dropout,
        ``neighbours`` (a sentence and the next) or ``title`` (a title and its text); PAIR_KINDS lists them.
    Segments(path, **the same options): the same segments, read lazily (``for text in Segments(...)``), with
        ``.stats`` complete after the iteration: what the memory-mapped corpus (mixcse/data/disk.py) streams.
    describe(stats, token_stats=None) -> str
        The one line a run prints about its text; ``token_stats`` is ``TokenizedCorpus.stats``.
    split_sentences(text) -> list[str]
    file_format(path) -> "lines" | "jsonl" | "csv" | "tsv" | "parquet"
    SEGMENTS = ("line", "sentence", "passage")

Formats, by suffix: ``.jsonl``, ``.csv``, ``.tsv`` (each optionally ``.gz``) and ``.parquet`` hold documents, one a
record; the text is the ``text_column`` field, or by default ``text`` with ``title`` in front when the file has one
(BEIR's ``corpus.jsonl``). Any other file is plain text, one document a line (``.txt``, ``.gz``).

Segments: ``line`` = each non-blank line; ``sentence`` = the sentences of each document (a title is a sentence of
its own); ``passage`` = each document whole (the tokenizer truncates it to ``max_seq_length``). Defaults: plain text
is read as it always was (``line``: every non-blank line, no dedupe); documents get ``sentence``, dedupe and
``min_words`` = 4 (SciFact's segments under 4 words are section heads, "J. Mol.", "(ABSTRACT TRUNCATED)": 0.6% of
segments).
Dedupe keeps the first of equal segments and remembers 16-byte BLAKE2b digests, not the strings.
``max_sentences`` keeps the first N segments that pass the filters and stops reading there.

Sentences come from sentencex (Wikimedia's segmenter: maintained, native wheels, ~25,000 SciFact abstracts/s here),
with one rule on top: a boundary inside a whitespace-free token ("H2A.Z", "AACR.This") is not a boundary. Compared on
500 SciFact abstracts with pysbd 0.3.4 (as accurate, but 120 abstracts/s: minutes per run on a large corpus, and
it cuts "(i) ... (ii) ..." lists into fragments) and blingfire 0.1.8 (fast, but misses sentences that start in
lower case, such as "p53 ..." or "miR-375 ...", and ships x86-64 binaries only); see docs/training-data.md.

Every problem with the file is one ``DataError`` naming it (and the line where there is one): missing file,
invalid JSON or CSV line, a record that is not an object, a missing column (with the columns found), a text field
that is not a string, and no segment left after filtering.
"""

from __future__ import annotations

import csv
import hashlib
import os
from pathlib import Path
from typing import Iterator

from mixcse.data.reader import iter_json_records, iter_lines
from mixcse.errors import DataError

SEGMENTS = ("line", "sentence", "passage")
DOCUMENT_MIN_WORDS = 4
_DOCUMENT_SUFFIXES = {".jsonl": "jsonl", ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet"}


def file_format(path: str | os.PathLike) -> str:
    suffixes = Path(path).suffixes
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
        if suffixes and suffixes[-1] == ".parquet":
            return "lines"  # parquet compresses itself; a .parquet.gz is not read as parquet
    return _DOCUMENT_SUFFIXES.get(suffixes[-1] if suffixes else "", "lines")


# ------------------------------------------------------------------------------------------- documents
def _join(title, text) -> str:
    return f"{title.strip()} {text.strip()}".strip() if title else text


def _field(record: dict, name: str, where: str):
    value = record[name]
    if value is None or isinstance(value, str):
        return value or ""
    raise DataError(f"{where}: field {name!r} is not text ({type(value).__name__})")


def _missing(where: str, column: str, found) -> DataError:
    return DataError(f"{where}: no column {column!r} (columns found: {', '.join(map(str, found)) or 'none'}); "
                     f"set text_column to the one that holds the text")


def _iter_jsonl(path: Path, text_column: str | None) -> Iterator[tuple[str, str]]:
    """(title, text) per record."""
    column = text_column or "text"
    for lineno, record in iter_json_records(path, what="training"):
        where = f"{path}:{lineno}"
        if column not in record:
            raise _missing(where, column, record)
        title = _field(record, "title", where) if text_column is None and "title" in record else ""
        yield title, _field(record, column, where)


def _iter_csv(path: Path, text_column: str | None, delimiter: str) -> Iterator[tuple[str, str]]:
    csv.field_size_limit(max(csv.field_size_limit(), 1 << 30))  # whole papers in one field: the default is 128 KiB
    lines = (line for _, line in iter_lines(path, what="training", strip=False))
    reader = csv.DictReader(lines, delimiter=delimiter)
    column = text_column or "text"
    try:
        header = [name.lstrip("\ufeff") for name in reader.fieldnames or []]  # a spreadsheet's byte-order mark
        reader.fieldnames = header
        if column not in header:
            raise _missing(str(path), column, header)
        use_title = text_column is None and "title" in header
        for row in reader:
            where = f"{path}:{reader.line_num}"
            if None in row:
                raise DataError(f"{where}: more fields than the header's {len(header)}")
            yield (row["title"] or "") if use_title else "", row[column] or ""
    except csv.Error as exc:
        raise DataError(f"{path}:{reader.line_num}: invalid CSV ({exc})") from None


def _iter_parquet(path: Path, text_column: str | None) -> Iterator[tuple[str, str]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"reading {path} needs pyarrow: pip install 'mixcse[documents]'") from None
    try:
        parquet = pq.ParquetFile(path)
        names = parquet.schema_arrow.names
        column = text_column or "text"
        if column not in names:
            raise _missing(str(path), column, names)
        use_title = text_column is None and "title" in names
        columns = ["title", column] if use_title else [column]
        row = 0
        for batch in parquet.iter_batches(batch_size=4096, columns=columns):
            texts = batch.column(column).to_pylist()
            titles = batch.column("title").to_pylist() if use_title else [""] * len(texts)
            for title, text in zip(titles, texts):
                row += 1
                for name, value in (("title", title), (column, text)):
                    if value is not None and not isinstance(value, str):
                        raise DataError(f"{path}: row {row}: column {name!r} is not text ({type(value).__name__})")
                yield title or "", text or ""
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise DataError(f"cannot read training file {path}: {str(exc).splitlines()[0]}") from None


def _iter_documents(path: Path, fmt: str, text_column: str | None) -> Iterator[tuple[str, str]]:
    if fmt == "jsonl":
        return _iter_jsonl(path, text_column)
    if fmt in ("csv", "tsv"):
        return _iter_csv(path, text_column, "," if fmt == "csv" else "\t")
    return _iter_parquet(path, text_column)


# -------------------------------------------------------------------------------------------- segments
def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``, stripped, whitespace runs collapsed to one space."""
    from sentencex import get_sentence_boundaries

    sentences: list[str] = []
    pending = ""
    for piece in get_sentence_boundaries("en", text):
        pending += piece["text"]
        if pending and not pending[-1].isspace() and piece["end_index"] < len(text):
            continue  # the splitter cut inside a token ("H2A.Z"): not a sentence boundary
        sentences.append(" ".join(pending.split()))
        pending = ""
    if pending:
        sentences.append(" ".join(pending.split()))
    return [s for s in sentences if s]


def _segments_of(title: str, text: str, segment: str) -> list[str]:
    if segment == "passage":
        passage = " ".join(_join(title, text).split())
        return [passage] if passage else []
    if segment == "line":
        return [line.strip() for part in (title, text) for line in part.splitlines() if line.strip()]
    return ([" ".join(title.split())] if title.strip() else []) + split_sentences(text)


class _Seen:
    """Set membership by 16-byte BLAKE2b digest: a fraction of the memory of the strings themselves."""

    def __init__(self):
        self._digests: set[bytes] = set()

    def add(self, text: str) -> bool:
        """True if ``text`` was new."""
        digest = hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
        if digest in self._digests:
            return False
        self._digests.add(digest)
        return True


class Segments:
    """The segments of a training file, read lazily: ``for text in Segments(path, ...)``. ``stats`` is complete
    once the iteration has ended (``read_segments`` lists the keys); an iteration that yields nothing raises
    ``DataError``. Options as ``read_segments``'s; they are checked (and the file's existence) on construction."""

    def __init__(self, path: str | os.PathLike, *, text_column: str | None = None, segment: str | None = None,
                 min_words: int | None = None, dedupe: bool | None = None, max_sentences: int | None = None):
        path = Path(path)
        fmt = file_format(path)
        self.documents_file = fmt != "lines"
        if text_column is not None and not self.documents_file:
            raise DataError(f"text_column applies to .jsonl, .csv, .tsv and .parquet files, not to {path}")
        if segment is None:
            segment = "sentence" if self.documents_file else "line"
        if segment not in SEGMENTS:
            raise DataError(f"segment must be one of {', '.join(SEGMENTS)}, got {segment!r}")
        if min_words is None:
            min_words = DOCUMENT_MIN_WORDS if self.documents_file else 1
        if dedupe is None:
            dedupe = self.documents_file
        if not path.is_file():
            raise DataError(f"training file not found: {path}")
        self.path, self.text_column, self.max_sentences = path, text_column, max_sentences
        self.stats = {"file": str(path), "format": fmt, "segment": segment, "min_words": min_words, "dedupe": dedupe,
                      "documents": 0, "segments": 0, "dropped_short": 0, "dropped_duplicates": 0}

    def documents(self) -> Iterator[tuple[str, str]]:
        """(title, text) of every document; a plain-text file's documents are its non-blank lines."""
        if self.documents_file:
            return _iter_documents(self.path, self.stats["format"], self.text_column)
        return (("", line) for _, line in iter_lines(self.path, what="training") if line)

    def __iter__(self) -> Iterator[str]:
        stats, path = self.stats, self.path
        segment, min_words, limit = stats["segment"], stats["min_words"], self.max_sentences
        documents = self.documents()  # in "line" mode a plain line is also the segment, exactly as read
        seen = _Seen() if stats["dedupe"] else None
        for title, text in documents:
            stats["documents"] += 1
            for piece in _segments_of(title, text, segment) if self.documents_file or segment != "line" else [text]:
                if min_words > 1 and len(piece.split()) < min_words:
                    stats["dropped_short"] += 1
                elif seen is not None and not seen.add(piece):
                    stats["dropped_duplicates"] += 1
                else:
                    stats["segments"] += 1
                    yield piece
                    if limit is not None and stats["segments"] >= limit:
                        return
        if not stats["segments"]:
            if not stats["documents"]:
                raise DataError(f"training file has no sentences: {path}")
            raise DataError(f"training file has no segments left after filtering: {path} ({stats['documents']} "
                            f"documents; {stats['dropped_short']} segments shorter than {min_words} words, "
                            f"{stats['dropped_duplicates']} duplicates)")


def read_segments(path: str | os.PathLike, *, text_column: str | None = None, segment: str | None = None,
                  min_words: int | None = None, dedupe: bool | None = None,
                  max_sentences: int | None = None) -> tuple[list[str], dict]:
    reader = Segments(path, text_column=text_column, segment=segment, min_words=min_words, dedupe=dedupe,
                      max_sentences=max_sentences)
    segments = list(reader)
    return segments, reader.stats


PAIR_KINDS = ("neighbours", "title")  # the text's own positive pairs (the other kinds: mixcse/training/levers/)


def read_positive_pairs(path: str | os.PathLike, *, positives: str, text_column: str | None = None,
               min_words: int | None = None, dedupe: bool | None = None,
               max_sentences: int | None = None) -> tuple[list[tuple[str, str]], dict]:
    """(anchor, positive) pairs that a document offers beyond dropout, and the stats of reading them.

    ``neighbours``: each sentence and the next one of the same document (the title counts as the first sentence;
    sentences shorter than ``min_words`` are dropped before pairing). ``title``: each document's title and its
    text as one passage (documents without a title are skipped). ``dedupe`` drops pairs whose anchor was seen;
    ``max_sentences`` keeps the first N pairs. Stats as ``Segments.stats``, ``segments`` counting pairs.
    """
    if positives not in PAIR_KINDS:
        raise DataError(f"positives must be one of {', '.join(PAIR_KINDS)}, got {positives!r}")
    reader = Segments(path, text_column=text_column, segment="sentence" if positives == "neighbours" else "passage",
                      min_words=min_words, dedupe=dedupe)
    stats = reader.stats | {"segment": f"{positives} pairs"}
    path, documents = reader.path, reader.documents()
    seen = _Seen() if stats["dedupe"] else None
    pairs: list[tuple[str, str]] = []
    titled = 0
    for title, text in documents:
        stats["documents"] += 1
        if positives == "title":
            title, passage = " ".join(title.split()), " ".join(text.split())
            titled += bool(title)
            candidates = [(title, passage)] if title and passage else []
        else:
            sentences = []
            for sentence in _segments_of(title, text, "sentence"):
                if len(sentence.split()) < stats["min_words"]:
                    stats["dropped_short"] += 1
                else:
                    sentences.append(sentence)
            candidates = list(zip(sentences, sentences[1:]))
        for anchor, positive in candidates:
            if seen is not None and not seen.add(anchor):
                stats["dropped_duplicates"] += 1
                continue
            pairs.append((anchor, positive))
            if max_sentences is not None and len(pairs) >= max_sentences:
                break
        if max_sentences is not None and len(pairs) >= max_sentences:
            break
    if positives == "title" and stats["documents"] and not titled:
        raise DataError(f"positives title needs documents with a title field: {path} has none")
    if not pairs:
        raise DataError(f"training file gives no {positives} pairs: {path} ({stats['documents']} documents)")
    stats["segments"] = len(pairs)
    return pairs, stats


def read_training_text(cfg) -> tuple[list[str], dict]:
    return read_segments(cfg.train_file, text_column=cfg.text_column, segment=cfg.segment, min_words=cfg.min_words,
                         dedupe=cfg.dedupe, max_sentences=cfg.max_sentences)


def describe(stats: dict, token_stats: dict | None = None) -> str:
    filters = []
    if stats["min_words"] > 1:
        filters.append(f"{stats['dropped_short']:,} shorter than {stats['min_words']} words")
    if stats["dedupe"]:
        filters.append(f"{stats['dropped_duplicates']:,} duplicates")
    line = (f"text: {stats['file']} ({stats['format']}): {stats['documents']:,} documents -> "
            f"{stats['segments']:,} segments ({stats['segment']}"
            + (f"; dropped {', '.join(filters)}" if filters else "") + ")")
    if token_stats:
        share = token_stats["truncated_share"]
        line += (f"; tokenised the {token_stats['sequences']:,} this run uses: {token_stats['tokens']:,} tokens, "
                 + ("share truncated unknown" if share is None else f"{share:.1%} truncated")
                 + f" at max_seq_length {token_stats['max_seq_length']}")
    return line
