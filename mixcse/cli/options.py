"""The options and checks that several verbs share: the model, its backend and precision (``encode``, ``search``,
``eval``), input files of sentences, the embeddings file format, and the one-line error."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from mixcse.data.reader import read_nonblank
from mixcse.errors import DataError, MixCSEError
from mixcse.models.encoder import POOLERS
from mixcse.models import inference
from mixcse.models.inference import BACKENDS, PRECISIONS

INFERENCE_PRECISIONS = tuple(dict.fromkeys(p for allowed in PRECISIONS.values() for p in allowed))
SAFETENSORS_KEY = "embeddings"  # the tensor of an embeddings .safetensors file (encode writes it, search reads it)

__all__ = ["BACKENDS", "INFERENCE_PRECISIONS", "SAFETENSORS_KEY", "add_backend_arguments", "add_model_arguments",
           "check_backend", "check_files", "error", "load_model", "positive_int", "read_lines", "show_progress"]


def error(message: str) -> int:
    """A user-facing failure: one ``error:`` line on stderr; the exit status 2."""
    print(f"error: {message}", file=sys.stderr)
    return 2


def check_files(paths, flag: str) -> None:
    """DataError naming ``flag`` for the first of ``paths`` that is not a file."""
    for path in paths or ():
        if not Path(path).is_file():
            raise DataError(f"{flag} {path}: file not found")


def read_lines(path: str | os.PathLike, what: str = "input") -> tuple[list[str], int]:
    """(non-blank stripped lines, number of blank lines skipped); DataError for a missing, unreadable or empty file."""
    lines, blank = read_nonblank(path, what=what)
    if not lines:
        raise DataError(f"{what} file has no sentences (it is empty or blank): {path}")
    return lines, blank


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="mixcse or sentence-transformers directory, or any Hugging Face model")
    p.add_argument("--pooler", choices=POOLERS, default=None,
                   help="override the model's pooler (default: the directory's own; cls_before_pooler for a plain "
                        "HF model)")
    p.add_argument("--batch-size", type=positive_int, default=64, help="sentences per forward pass (default 64)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    add_backend_arguments(p)
    p.add_argument("--trust-remote-code", action="store_true", help="allow custom model code from the model dir")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress (a bar on a terminal, else a line on stderr every 30 s)")


def add_backend_arguments(p: argparse.ArgumentParser, precisions: tuple[str, ...] = INFERENCE_PRECISIONS
                          ) -> None:
    p.add_argument("--backend", choices=BACKENDS, default="torch",
                   help="torch (default), or onnx: onnxruntime on the folder's onnx/model.onnx, written by `mixcse "
                        "export` (CPU, no torch at run time; embeddings equal torch's to 1e-4)")
    p.add_argument("--precision", choices=precisions, default="fp32",
                   help="fp32 (default); bf16: torch backend, bfloat16 autocast; int8: onnx backend, "
                        "onnx/model_qint8.onnx (`mixcse export --quantize int8`)")


def check_backend(backend: str, precision: str) -> None:
    """The precisions each backend has: bf16 is torch's autocast, int8 an exported quantised graph."""
    if precision not in PRECISIONS[backend]:
        raise MixCSEError(f"--precision {precision} needs --backend {'torch' if precision == 'bf16' else 'onnx'}")


def _device(name: str | None, backend: str = "torch") -> str | None:
    if name or backend != "torch":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_model(args: argparse.Namespace):
    """The encoder of ``encode`` and ``search``'s model options (`open_encoder`)."""
    check_backend(args.backend, args.precision)
    try:
        return inference.open_encoder(args.model, backend=args.backend, pooler=args.pooler, precision=args.precision,
                            device=_device(args.device, args.backend), trust_remote_code=args.trust_remote_code)
    except RuntimeError as exc:  # e.g. an unknown or unavailable torch device
        raise MixCSEError(f"cannot load model {args.model!r}: {str(exc).splitlines()[0]}") from None


def show_progress(args: argparse.Namespace) -> bool:
    """A bar on a terminal; elsewhere (a log, CI) a plain line every 30 s (mixcse.utils.progress)."""
    return not args.no_progress


