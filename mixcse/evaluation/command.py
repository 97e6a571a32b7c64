"""CLI glue for `mixcse eval` and `mixcse data download` (wired into mixcse/cli.py).

Both commands print a user-facing failure (missing data, bad file, refused overwrite) as one `error: ...` line
and return non-zero, so that scripts can tell a data problem from a crash.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from .classifiers import CLASSIFIER_ALIASES, CLASSIFIERS, DEFAULT_CLASSIFIER
from .data import DataError, default_data_dir
from .runner import evaluate, expand_tasks, format_tables, to_jsonable

try:
    from mixcse.errors import MixCSEError as _UserError
except ImportError:  # pragma: no cover
    _UserError = DataError


def resolve_encoder(model, pooler=None):  # indirection so tests can substitute a fake encoder
    from .encoding import resolve_encoder as _resolve

    return _resolve(model, pooler=pooler)


def _error(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def add_eval_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("model", help="mixcse output dir, sentence-transformers dir, or HF model path/name")
    parser.add_argument("--tasks", default="all",
                        help="comma-separated: all | sts | transfer | analysis | task names (STS12 ... SICKRelatedness, "
                             "MR, CR, SUBJ, MPQA, SST2, TREC, MRPC); default: all")
    parser.add_argument("--mode", choices=("test", "fasttest"), default="test",
                        help="test: 10-fold CV, full grids (the published protocol); fasttest: 5 folds, smaller grids")
    parser.add_argument("--pooler", default=None, help="pooler for a plain HF model (e.g. cls, cls_before_pooler, avg)")
    parser.add_argument("--classifier", choices=list(CLASSIFIERS) + list(CLASSIFIER_ALIASES),
                        default=DEFAULT_CLASSIFIER,
                        help="transfer probe: senteval-pytorch (default; alias torch): SentEval's PyTorch logistic "
                             "regression, the protocol of the SimCSE/MixCSE papers; sklearn-converged (alias "
                             "sklearn): scikit-learn LogisticRegression solved to convergence on SentEval's C grids")
    parser.add_argument("--data-dir", default=None,
                        help="SentEval data (the downstream/ folder or its parent); default $MIXCSE_DATA, then ./data")
    parser.add_argument("--output", default=None, help="write every number and the exact settings as JSON here")
    parser.add_argument("--overwrite", action="store_true", help="allow replacing an existing --output file")
    parser.add_argument("--cache-dir", default=None, help="on-disk embedding cache, keyed by model fingerprint")
    parser.add_argument("--batch-size", type=int, default=64, help="encoding batch size (default 64)")
    parser.add_argument("--workers", type=int, default=1,
                        help="processes for the transfer probes (default 1); one per idle core cuts a full "
                             "evaluation's wall time roughly by that factor, results unchanged")
    return parser


def _write_json_atomic(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=2, allow_nan=False)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run_eval(args: argparse.Namespace) -> int:
    output = Path(args.output) if args.output else None
    if output is not None and output.exists() and not args.overwrite:
        return _error(f"{output} exists; pass --overwrite to replace it")
    try:
        tasks = expand_tasks(args.tasks)
    except ValueError as exc:
        return _error(str(exc))
    if args.batch_size < 1:
        return _error("--batch-size must be at least 1")
    if args.workers < 1:
        return _error("--workers must be at least 1")
    data_dir = args.data_dir if args.data_dir is not None else default_data_dir()
    try:
        encoder = resolve_encoder(args.model, pooler=args.pooler)
        results = evaluate(encoder, tasks=tasks, data_dir=data_dir, mode=args.mode, classifier=args.classifier,
                           cache_dir=args.cache_dir, batch_size=args.batch_size, workers=args.workers)
    except (_UserError, DataError, FileNotFoundError) as exc:
        return _error(str(exc))
    pooler = args.pooler or getattr(encoder, "pooler", None)
    results["settings"].update(model=str(args.model), pooler=pooler if isinstance(pooler, str) else None,
                               cli_args={k: v for k, v in vars(args).items()
                                         if isinstance(v, (str, int, float, bool, type(None)))})
    print(format_tables(results))
    _update_card(args.model, results)
    if output is not None:
        if output.exists() and not args.overwrite:  # appeared while we were running
            return _error(f"{output} exists; pass --overwrite to replace it")
        _write_json_atomic(output, to_jsonable(results))
        print(f"\nwrote {output}")
    return 0


def _update_card(model, results: dict) -> None:
    """A mixcse model directory gets its STS / transfer table added to its model card."""
    if not isinstance(model, (str, os.PathLike)) or not (Path(model) / "mixcse.json").is_file():
        return
    from mixcse.modelcard import update_model_card_with_eval

    update_model_card_with_eval(Path(model), to_jsonable(results))
    print(f"updated the model card {Path(model) / 'README.md'}")


def add_data_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("action", choices=("download",), help="download: fetch and verify the benchmark data")
    parser.add_argument("--dest", default="data", help="target folder (default ./data): DEST/downstream/... and "
                                                       "DEST/wiki1m_for_simcse.txt")
    parser.add_argument("--what", default="senteval,wiki1m", help="comma-separated: senteval, wiki1m")
    parser.add_argument("--base-url", default=None,
                        help="where senteval.tar and wiki1m_for_simcse.txt live (default $MIXCSE_DATA_URL, then the "
                             "SimCSE authors' dataset repository)")
    return parser


def run_data(args: argparse.Namespace) -> int:
    from .download import download

    try:
        report = download(args.dest, what=args.what.split(","), base_url=args.base_url)
    except (_UserError, DataError) as exc:
        return _error(str(exc))
    for item, rep in report.items():
        print(f"{item}: {rep['status']} -> {rep['path']}")
    return 0


def main(argv=None) -> int:
    """Stand-alone entry point (`python -m mixcse.evaluation.command eval ...`) until mixcse.cli wires these in."""
    parser = argparse.ArgumentParser(prog="mixcse")
    sub = parser.add_subparsers(dest="command", required=True)
    add_eval_arguments(sub.add_parser("eval", help="evaluate a sentence encoder (SentEval protocol)"))
    add_data_arguments(sub.add_parser("data", help="benchmark and training data"))
    args = parser.parse_args(argv)
    return run_eval(args) if args.command == "eval" else run_data(args)


if __name__ == "__main__":
    sys.exit(main())
