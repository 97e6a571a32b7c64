"""Atomic file writes that leave files with the permissions of any other file the user creates.

Interface:
- ``atomic_path(path)``: context manager yielding a temporary path beside ``path``; when the block ends without an
  exception the temp file gets the normal mode (0666 minus the umask, i.e. 0644 under the usual umask 022) and is
  renamed onto ``path``; otherwise it is removed and ``path`` is left as it was.
- ``atomic_write_text(path, text)`` and ``atomic_write_json(path, obj)`` (indent 2, NaN refused, trailing newline).
- ``normal_file_mode()``: the mode ``open(path, "w")`` would give a new file.
- ``unwritable_reason(path)``: why a file could not be created at ``path`` (a folder is there, or a parent is a
  file), or None; lets a command refuse bad output paths before its slow work.

Why: ``tempfile.mkstemp`` creates 0600 files, and a rename keeps that mode, so a plain temp-and-rename leaves
outputs that other users (or a web server) cannot read.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def normal_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def unwritable_reason(path: str | os.PathLike) -> str | None:
    path = Path(path)
    if path.is_dir():
        return f"{path} is a folder"
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else f"{parent} is a file, not a folder"
    return None


def _fsync(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, normal_file_mode())
        _fsync(tmp)  # the data reaches the disk before the name does: a crash leaves the old file or the new one
        os.replace(tmp, path)
        _fsync(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_json(path: str | os.PathLike, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, allow_nan=False) + "\n")
