"""``mixcse merge A B [C ...] [--weights W ...] --output DIR [--allow-extrapolation]`` (see mixcse/models/merge.py);
``mixcse merge START ADAPTED --select-data dev.tsv [--guard-data stsb_dev ...] --output DIR``: the blend weight
chosen as a training run chooses it (mixcse/training/selection.py)."""

from __future__ import annotations

import math

from mixcse.errors import ConfigError
from mixcse.models.merge import merge_models


def add_merge_arguments(p) -> None:
    p.description = ("Write the weighted average of model folders of one architecture, tokenizer and pooler (a "
                     "blend of a start model and its adapted copy, a soup of seeds) as a new model folder: the "
                     "first folder's files with the merged weights.")
    p.add_argument("models", nargs="+", metavar="MODEL", help="two or more mixcse, sentence-transformers or Hugging "
                                                              "Face model folders")
    p.add_argument("--weights", nargs="+", type=float, default=None, metavar="W",
                   help="one weight per model, summing to 1 (default: equal weights)")
    p.add_argument("--output", required=True, metavar="DIR", help="new folder to write (must not exist)")
    p.add_argument("--allow-extrapolation", action="store_true",
                   help="allow negative weights (still summing to 1), e.g. --weights -0.5 1.5 steps past the "
                        "second model along the line from the first")
    search = p.add_argument_group("search the blend of START and ADAPTED (instead of --weights)")
    search.add_argument("--select-data", metavar="PAIRS", help="labelled pairs (sentence1, sentence2, label) that "
                                                               "score each blend, as select_data in training")
    search.add_argument("--guard-data", nargs="+", metavar="GUARD", help="stsb_dev or labelled pairs: a blend "
                                                                        "passes when every guard is within tolerance")
    search.add_argument("--guard-tolerance", nargs="+", type=float, metavar="T", default=[0.5],
                        help="points a guard may fall below the start model (one, or one per guard; default 0.5)")
    search.add_argument("--data-dir", metavar="D", help="SentEval folder (STS-B dev for the stsb_dev guard)")


def _check_search(args) -> list[float]:
    """The tolerances of a search; refuses what a search cannot take (ConfigError: one error line, exit 2)."""
    if args.select_data is None:
        if args.guard_data or args.data_dir:
            raise ConfigError("--guard-data and --data-dir guard the blend search: give --select-data too")
        return []
    if args.weights is not None or args.allow_extrapolation:
        raise ConfigError("--weights and --allow-extrapolation go without --select-data, which searches a blend "
                          "weight between 0 and 1")
    if len(args.models) != 2:
        raise ConfigError(f"--select-data searches the blend of two models (START ADAPTED), got {len(args.models)}")
    tolerances = list(args.guard_tolerance)
    if len(tolerances) == 1:
        tolerances *= max(1, len(args.guard_data or []))
    if args.guard_data and len(tolerances) != len(args.guard_data):
        raise ConfigError(f"--guard-tolerance gives {len(tolerances)} values for {len(args.guard_data)} guards; give "
                          f"one, or one per guard")
    bad = next((t for t in tolerances if not math.isfinite(t) or t < 0), None)
    if bad is not None:
        raise ConfigError(f"--guard-tolerance must be finite and >= 0, got {bad}")
    return tolerances


def run_merge(args) -> int:
    tolerances = _check_search(args)
    if args.select_data is not None:
        from mixcse.training.selection import search_blend

        report = search_blend(*args.models, select_data=args.select_data, guard_data=args.guard_data,
                              guard_tolerance=tolerances, data_dir=args.data_dir, output=args.output)
        print(f"wrote {report['output']}: {1 - report['alpha']:g} x {args.models[0]} + {report['alpha']:g} x "
              f"{args.models[1]}")
        return 0
    report = merge_models(args.models, args.weights, output=args.output,
                          allow_extrapolation=args.allow_extrapolation)
    terms = " + ".join(f"{weight:g} x {name}" for name, weight in zip(report["inputs"], report["weights"]))
    print(f"wrote {report['output']}: {terms} ({report['tensors']} tensors, pooler {report['pooler']})")
    return 0
