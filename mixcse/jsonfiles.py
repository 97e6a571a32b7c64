"""JSON in and out of files: strict values for writing, and two readers with different contracts.

    to_jsonable(obj)        nested dicts/lists with NaN/inf -> None, numpy/torch scalars -> Python, other objects
                            -> str: something ``json.dumps`` writes as strict JSON
    read_json(path)         the parsed file; a missing or malformed file raises MixCSEError naming it (for inputs
                            the user gave: a model directory's configuration)
    read_json_or_none(path) the parsed file, or None when it is missing or malformed (for optional records that are
                            rewritten anyway: a model card's inputs)
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .errors import MixCSEError


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
