"""``mixcse encode``: embeddings of a file of sentences; the model, backend and precision options that ``search``
and ``eval`` share.

Input files hold one sentence per line (plain text or .gz, UTF-8); blank lines are skipped, so row i of the
embeddings is the i-th non-blank line.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from mixcse.data.reader import read_nonblank
from mixcse.errors import DataError, MixCSEError
from mixcse.models.encoder import POOLERS
from mixcse.models.inference import BACKENDS, PRECISIONS, open_encoder
from mixcse.utils.files import atomic_path, check_new_output

OUTPUT_FORMATS = (".npy", ".safetensors")
INFERENCE_PRECISIONS = tuple(dict.fromkeys(p for allowed in PRECISIONS.values() for p in allowed))
SAFETENSORS_KEY = "embeddings"


# ----------------------------------------------------------------------------------------------- files
def read_lines(path: str | os.PathLike, what: str = "input") -> tuple[list[str], int]:
    """(non-blank stripped lines, number of blank lines skipped); DataError for a missing, unreadable or empty file."""
    lines, blank = read_nonblank(path, what=what)
    if not lines:
        raise DataError(f"{what} file has no sentences (it is empty or blank): {path}")
    return lines, blank


def check_output_path(path: str | os.PathLike, overwrite: bool) -> Path:
    path = Path(path)
    if path.suffix not in OUTPUT_FORMATS:
        raise MixCSEError(f"--output must end in {' or '.join(OUTPUT_FORMATS)}, got {path.name!r}")
    return check_new_output(path, overwrite)


def save_embeddings(path: Path, embeddings: np.ndarray, metadata: dict[str, str] | None = None) -> None:
    """.npy or .safetensors (one tensor named ``embeddings``), written to a temp file then moved into place."""
    embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
    with atomic_path(path) as tmp:
        if path.suffix == ".npy":
            with open(tmp, "wb") as fh:
                np.save(fh, embeddings)
        else:
            from safetensors.numpy import save_file

            save_file({SAFETENSORS_KEY: embeddings}, str(tmp), metadata=metadata)


# --------------------------------------------------------------------------------------------- commands
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


def add_backend_arguments(p: argparse.ArgumentParser, precisions: tuple[str, ...] = INFERENCE_PRECISIONS) -> None:
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


def add_encode_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Embed a file of sentences (one a line; blank lines skipped) with length-sorted batches; row i "
                     "of the output is the i-th sentence of the input.")
    add_model_arguments(p)
    p.add_argument("--input", required=True, metavar="FILE", help="sentences, one a line (.txt or .gz)")
    p.add_argument("--output", required=True, metavar="OUT",
                   help="emb.npy or emb.safetensors (tensor 'embeddings', float32)")
    p.add_argument("--normalize", action="store_true", help="l2-normalise the embeddings")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output file")


def _device(name: str | None, backend: str = "torch") -> str | None:
    if name or backend != "torch":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_model(args: argparse.Namespace):
    """The encoder of ``encode`` and ``search``'s model options (`open_encoder`)."""
    check_backend(args.backend, args.precision)
    try:
        return open_encoder(args.model, backend=args.backend, pooler=args.pooler, precision=args.precision,
                            device=_device(args.device, args.backend), trust_remote_code=args.trust_remote_code)
    except RuntimeError as exc:  # e.g. an unknown or unavailable torch device
        raise MixCSEError(f"cannot load model {args.model!r}: {str(exc).splitlines()[0]}") from None


def show_progress(args: argparse.Namespace) -> bool:
    """A bar on a terminal; elsewhere (a log, CI) a plain line every 30 s (mixcse.utils.progress)."""
    return not args.no_progress


def run_encode(args: argparse.Namespace) -> int:
    # Every check on the user's files comes before the (slow) model load.
    output = check_output_path(args.output, args.overwrite)
    sentences, blank = read_lines(args.input, "input")
    encoder = load_model(args)
    start = time.perf_counter()
    embeddings = encoder.encode(sentences, batch_size=args.batch_size, show_progress=show_progress(args))
    seconds = time.perf_counter() - start
    if args.normalize:
        from mixcse.models.search import normalize_rows

        embeddings = normalize_rows(embeddings)
    save_embeddings(output, embeddings, metadata={"model": str(args.model), "pooler": encoder.pooler,
                                                   "backend": args.backend, "precision": args.precision,
                                                   "normalized": str(bool(args.normalize)).lower(),
                                                   "rows": str(len(sentences))})
    if blank:
        print(f"note: skipped {blank} blank line{'s' if blank != 1 else ''} of {args.input}", file=sys.stderr)
    print(f"wrote {embeddings.shape[0]} x {embeddings.shape[1]} embeddings (pooler {encoder.pooler}) to {output} "
          f"in {seconds:.1f}s ({len(sentences) / max(seconds, 1e-9):.0f} sentences/s)")
    return 0
