"""``mixcse merge A B [C ...] [--weights W ...] --output DIR [--allow-extrapolation]`` (see mixcse/models/merge.py)."""

from __future__ import annotations

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


def run_merge(args) -> int:
    report = merge_models(args.models, args.weights, output=args.output,
                          allow_extrapolation=args.allow_extrapolation)
    terms = " + ".join(f"{weight:g} x {name}" for name, weight in zip(report["inputs"], report["weights"]))
    print(f"wrote {report['output']}: {terms} ({report['tensors']} tensors, pooler {report['pooler']})")
    return 0
