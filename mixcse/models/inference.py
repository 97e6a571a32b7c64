"""Inference: ``open_encoder``, the one backend dispatch."""
from __future__ import annotations

import os
from typing import Any

BACKENDS = ("torch", "onnx")


def open_encoder(model: Any, *, backend: str = "torch", pooler: str | None = None, precision: str = "fp32",
                 device: str | None = None, threads: int | None = None, trust_remote_code: bool = False) -> Any:
    """A path or name becomes an encoder on ``backend``; an encoder object or a callable passes through."""
    if not isinstance(model, (str, os.PathLike)):
        if hasattr(model, "encode") or callable(model):
            return model
        raise TypeError(f"not an encoder: {type(model).__name__} (need .encode(list[str]) or a callable)")
    if backend == "onnx":
        from mixcse.models.onnx_backend import OnnxSentenceEncoder

        return OnnxSentenceEncoder.load(model, pooler=pooler, precision=precision, threads=threads)
    from mixcse.models.sentence_encoder import SentenceEncoder

    return SentenceEncoder.load(model, pooler=pooler, precision=precision, backend=backend, device=device,
                                trust_remote_code=trust_remote_code, threads=threads)
