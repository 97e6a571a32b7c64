"""One reader for every text file mixcse takes in (training text, ``encode``/``search`` input, benchmark corpora).

Interface:
    iter_lines(path, *, what="input", strip=True) -> Iterator[tuple[int, str]]
        (1-based line number, line) for every line of a plain or gzip-compressed (``.gz``) file, blank lines
        included (as ""). ``strip=False`` keeps each line's whitespace and newline (what ``csv`` needs).
    read_nonblank(path, *, what="input") -> tuple[list[str], int]
        (the non-blank stripped lines, the number of blank lines skipped); row i is the i-th non-blank line.
    iter_json_records(path, *, what="input") -> Iterator[tuple[int, dict]]
        (line number, object) for every non-blank line of a JSON-lines file; ``PATH:LINE: invalid JSON (...)`` or
        ``PATH:LINE: expected a JSON object, got list`` otherwise.

Every failure is a ``DataError`` with one line of text: ``{what} file not found: PATH``; ``PATH:LINE: not a text
file (NUL byte)`` (checked on the raw bytes, before decoding); ``PATH:LINE: not UTF-8 text`` (strict decoding: a
binary or mis-encoded file fails loudly, at its line); ``cannot read {what} file PATH: ...`` for an unreadable file
or a corrupt, truncated or fake gzip stream. Nothing is decompressed ahead: a reader that stops early reads only
what it used.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from pathlib import Path
from typing import Iterator

from mixcse.errors import DataError


def iter_lines(path: str | os.PathLike, *, what: str = "input", strip: bool = True) -> Iterator[tuple[int, str]]:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{what} file not found: {path}")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                if b"\0" in raw:
                    raise DataError(f"{path}:{lineno}: not a text file (NUL byte)")
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise DataError(f"{path}:{lineno}: not UTF-8 text") from None
                yield lineno, line.strip() if strip else line
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError; EOFError: a truncated stream
        raise DataError(f"cannot read {what} file {path}: {exc}") from None


def iter_json_records(path: str | os.PathLike, *, what: str = "input") -> Iterator[tuple[int, dict]]:
    for lineno, line in iter_lines(path, what=what):
        if not line:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{lineno}: invalid JSON ({exc.msg}, column {exc.colno})") from None
        if not isinstance(record, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
        yield lineno, record


def read_nonblank(path: str | os.PathLike, *, what: str = "input") -> tuple[list[str], int]:
    lines: list[str] = []
    blank = 0
    for _, line in iter_lines(path, what=what):
        if line:
            lines.append(line)
        else:
            blank += 1
    return lines, blank
