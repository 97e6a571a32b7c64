"""``mixcse search``: exact cosine search over a file of sentences (or its embeddings from ``mixcse encode``)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from mixcse.cli.options import (
    SAFETENSORS_KEY,
    add_model_arguments,
    load_model,
    positive_int,
    read_lines,
    show_progress,
)
from mixcse.errors import MixCSEError
from mixcse.models.search import INDEXES, resolve_backend, top_k_cosine


def add_search_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Exact cosine search: the top-k sentences of a corpus for each query (faiss IndexFlatIP when "
                     "installed, else numpy).")
    add_model_arguments(p)
    p.add_argument("--corpus", required=True, metavar="FILE", help="sentences, one a line (.txt or .gz)")
    p.add_argument("--query", required=True, action="append", metavar="TEXT",
                   help="the query sentence; repeat for several")
    p.add_argument("--top-k", type=positive_int, default=5, help="results per query (default 5)")
    p.add_argument("--corpus-embeddings", metavar="EMB", default=None,
                   help="embeddings of --corpus from 'mixcse encode' with the same model (skips encoding it)")
    p.add_argument("--index", choices=INDEXES, default="auto",
                   help="exact search with faiss or numpy (default auto: faiss if importable)")


def load_embeddings(path: str | os.PathLike) -> np.ndarray:
    """The (n, d) embeddings `mixcse encode` wrote (.npy, or .safetensors with one tensor); MixCSEError otherwise."""
    path = Path(path)
    if not path.is_file():
        raise MixCSEError(f"embeddings file not found: {path}")
    try:
        if path.suffix == ".npy":
            arr = np.load(path, allow_pickle=False)
        elif path.suffix == ".safetensors":
            from safetensors.numpy import load_file

            tensors = load_file(str(path))
            if SAFETENSORS_KEY in tensors:
                arr = tensors[SAFETENSORS_KEY]
            elif len(tensors) == 1:
                arr = next(iter(tensors.values()))
            else:
                raise MixCSEError(f"{path} holds several tensors and none is named {SAFETENSORS_KEY!r}")
        else:
            raise MixCSEError(f"embeddings must be a .npy or .safetensors file, got {path.name!r}")
    except (OSError, ValueError) as exc:
        raise MixCSEError(f"cannot read embeddings {path}: {str(exc).splitlines()[0] if str(exc) else exc}") \
            from None
    if arr.ndim != 2:
        raise MixCSEError(f"{path}: expected a 2-D array of embeddings, got shape {arr.shape}")
    return arr


def run_search(args: argparse.Namespace) -> int:
    backend = resolve_backend(args.index)
    sentences, _ = read_lines(args.corpus, "corpus")
    stored = load_embeddings(args.corpus_embeddings) if args.corpus_embeddings else None
    if stored is not None and stored.shape[0] != len(sentences):
        raise MixCSEError(f"--corpus-embeddings has {stored.shape[0]} rows but --corpus has {len(sentences)} "
                          f"sentences")
    queries = [q for q in args.query]
    if not all(q.strip() for q in queries):
        raise MixCSEError("--query must not be empty")
    encoder = load_model(args)
    show = show_progress(args)
    corpus = stored if stored is not None else encoder.encode(sentences, batch_size=args.batch_size,
                                                              show_progress=show)
    if corpus.shape[1] != encoder.dimension:
        raise MixCSEError(f"--corpus-embeddings have {corpus.shape[1]} dimensions, the model {encoder.dimension}")
    scores, indices = top_k_cosine(encoder.encode(queries, batch_size=args.batch_size), corpus, args.top_k,
                                   backend=backend)
    for n, query in enumerate(queries):
        if n:
            print()
        print(f"query: {query}")
        for rank, (score, index) in enumerate(zip(scores[n], indices[n]), 1):
            print(f"{rank:>3}  {score:.4f}  {sentences[index]}")
    return 0
