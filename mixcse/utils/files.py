"""Files in and out: atomic writes with normal permissions, and JSON.

Atomic writes leave files with the permissions of any other file the user creates:
- ``atomic_path(path)``: context manager yielding a temporary path beside ``path``; when the block ends without an
  exception the temp file gets the normal mode (0666 minus the umask, i.e. 0644 under the usual umask 022) and is
  renamed onto ``path``; otherwise it is removed and ``path`` is left as it was.
- ``atomic_write_text(path, text)`` and ``atomic_write_json(path, obj)`` (indent 2, NaN refused, trailing newline).
- ``normal_file_mode()``: the mode ``open(path, "w")`` would give a new file.
- ``unwritable_reason(path)``: why a file could not be created at ``path`` (a folder is there, or a parent is a
  file), or None; lets a command refuse bad output paths before its slow work.
- ``staged_folder(output)``: context manager yielding an empty staging folder beside ``output`` (a new folder);
  when the block ends without an exception the folder gets normal modes and is renamed onto ``output``; otherwise
  it is removed, with any parent folders it created. ``check_new_folder(output)`` refuses an existing or unwritable
  ``output`` before the slow work.
- ``file_digest(paths, algorithm="sha256")``: the hex digest of a file's bytes, or of several files' bytes read one
  after another into one hash (weights fingerprints, graph digests, cache keys, download checksums).

Why: ``tempfile.mkstemp`` creates 0600 files, and a rename keeps that mode, so a plain temp-and-rename leaves
outputs that other users (or a web server) cannot read.

JSON in and out of files: strict values for writing, and two readers with different contracts.

    to_jsonable(obj)        nested dicts/lists with NaN/inf -> None, numpy/torch scalars -> Python, other objects
                            -> str: something ``json.dumps`` writes as strict JSON
    read_json(path)         the parsed file; a missing or malformed file raises MixCSEError naming it (for inputs
                            the user gave: a model directory's configuration)
    read_json_or_none(path) the parsed file, or None when it is missing or malformed (for optional records that are
                            rewritten anyway: a model card's inputs)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mixcse.errors import MixCSEError


def cache_home() -> Path:
    """mixcse's own folder for downloads and caches: ``$MIXCSE_CACHE``, else ``~/.cache/mixcse`` (as Hugging Face
    keeps ``~/.cache/huggingface``)."""
    env = os.environ.get("MIXCSE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "mixcse"


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


def check_new_output(path: str | os.PathLike, overwrite: bool, flag: str = "--output") -> Path:
    """The one check of every command that writes an output: ``path`` can be written, and an existing one is
    replaced only with ``overwrite``. Raises ``MixCSEError`` with the message the command prints."""
    path = Path(path)
    reason = unwritable_reason(path)
    if reason:
        raise MixCSEError(f"cannot write {flag} {path}: {reason}")
    if path.exists() and not overwrite:
        raise MixCSEError(f"{path} exists; pass --overwrite to replace it")
    return path


def check_new_folder(output: Path) -> None:
    """Refuse an ``output`` folder that exists or cannot be created (`MixCSEError`)."""
    if output.exists() or output.is_symlink():
        raise MixCSEError(f"output {output} exists; choose a new folder")
    reason = unwritable_reason(output)
    if reason:
        raise MixCSEError(f"cannot write --output {output}: {reason}")


def normal_modes(root: Path) -> None:
    """Folders and files under ``root`` as the user's umask would make them (mkdtemp and temp files are private)."""
    file_mode = normal_file_mode()
    dir_mode = file_mode | ((file_mode & 0o444) >> 2)  # +x wherever +r
    os.chmod(root, dir_mode)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), dir_mode)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), file_mode)


@contextlib.contextmanager
def staged_folder(output: Path) -> Iterator[Path]:
    """A staging folder (``<work>/model``, not yet created) beside ``output`` that becomes ``output`` when the block
    succeeds; on failure nothing is left behind, not even the parent folders made for it."""
    import shutil

    created = [d for d in reversed(output.absolute().parents) if not d.exists()]
    output.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    done = False
    try:
        yield work / "model"
        if output.exists() or output.is_symlink():  # appeared meanwhile
            raise MixCSEError(f"output {output} exists; choose a new folder")
        normal_modes(work / "model")
        os.replace(work / "model", output)
        done = True
    finally:
        shutil.rmtree(work, ignore_errors=True)
        for folder in reversed(created if not done else []):
            with contextlib.suppress(OSError):
                folder.rmdir()


def file_digest(paths: str | os.PathLike | list, *, algorithm: str = "sha256", prefix: bytes = b"",
                **params) -> str:
    """The hex digest of ``prefix`` followed by the bytes of ``paths`` (one file, or several in the order given),
    read in chunks (hashlib.file_digest). ``params``: the hash's own (``digest_size=16`` for blake2b)."""
    digest = hashlib.new(algorithm, prefix, **params)
    for path in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        with open(path, "rb") as fh:
            hashlib.file_digest(fh, lambda: digest)  # updates ``digest`` itself
    return digest.hexdigest()


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


def to_jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", 1) == 0:  # numpy / torch scalars
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MixCSEError(f"cannot read {path}: {exc}") from None


def read_json_or_none(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
