"""``mixcse encode``: embeddings of a file of sentences (the model options it shares with ``search`` and ``eval``
are in options.py).

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

from mixcse.cli.options import SAFETENSORS_KEY, add_model_arguments, load_model, read_lines, show_progress
from mixcse.errors import MixCSEError
from mixcse.utils.files import atomic_path, check_new_output

OUTPUT_FORMATS = (".npy", ".safetensors")


# ----------------------------------------------------------------------------------------------- files
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
def add_encode_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Embed a file of sentences (one a line; blank lines skipped) with length-sorted batches; row i "
                     "of the output is the i-th sentence of the input.")
    add_model_arguments(p)
    p.add_argument("--input", required=True, metavar="FILE", help="sentences, one a line (.txt or .gz)")
    p.add_argument("--output", required=True, metavar="OUT",
                   help="emb.npy or emb.safetensors (tensor 'embeddings', float32)")
    p.add_argument("--normalize", action="store_true", help="l2-normalise the embeddings")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output file")


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
