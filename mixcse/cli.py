"""``mixcse`` command line: train | eval | encode | search | export | data."""

from __future__ import annotations

import argparse
import os
import sys

from .errors import MixCSEError


def _train(args: argparse.Namespace) -> int:
    from .config import load_recipe
    from .trainer import train

    config = load_recipe(args.recipe, args.overrides)
    result = train(config, overwrite=args.overwrite, resume=args.resume)
    if result.is_main:  # one report per run, from rank 0
        _report(result)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # The run is finished and every file closed. A torchrun worker that goes on to interpreter teardown can
        # abort there (SIGABRT, "terminate called without an active exception": about 1 in 20-40 two-process
        # gloo runs on a loaded 2-core machine, torch 2.13), which fails a finished job; so a worker exits here.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


METRIC_NAMES = {"stsb_dev": "STS-B dev", "pairs_ap": "dev pairs AP", "pairs_spearman": "dev pairs Spearman",
                None: "selection metric (none)"}


def _report(result) -> None:
    fmt = lambda x: "n/a" if x is None else f"{x:.2f}"  # noqa: E731
    metric = METRIC_NAMES.get(result.select_metric, result.select_metric)
    print(f"start {metric} {fmt(result.raw_dev)} -> best {fmt(result.best_dev)} at step {result.best_step}; "
          f"{result.steps} steps in {result.train_seconds:.1f}s ({result.sentences_per_second:.1f} sentences/s)"
          + (f", {wall:.0f}s wall in all" if (wall := getattr(result, "wall_seconds", None)) is not None else "")
          + f"; model in {result.output_dir}/best")
    if getattr(result, "test_pairs", None):
        print("held-out pairs (never used for selection), start -> best: " + "; ".join(
            f"{name} {r['metric'].upper() if r['metric'] == 'ap' else r['metric']} {fmt(r['start'])} -> "
            f"{fmt(r['best'])}" + (f" ({r['best'] - r['start']:+.2f})" if r["start"] is not None else "")
            for name, r in result.test_pairs.items()))
    print(_next_step(result))


def _next_step(result) -> str:
    """One line on what the selection number means and what to run next, so a first run is not misread."""
    if result.select_metric is not None and result.best_step == 0:
        if result.select_metric == "stsb_dev":
            return ("note: no training step beat the start model on STS-B dev, so best/ is the start model. STS-B "
                    "dev measures general-domain similarity; on a weak masked LM such as the CPU stand-in "
                    "SimCSE/MixCSE do not raise it (they do on all-MiniLM-L6-v2, docs/results.md); to adapt a real "
                    "encoder to your own domain see docs/domain-adaptation.md (recipes/domain/)")
        metric = METRIC_NAMES.get(result.select_metric, result.select_metric)
        return (f"note: no training step beat the start model on {metric}, so best/ is the start "
                f"model; docs/domain-adaptation.md says when adaptation does not help and what to try")
    if getattr(result, "test_pairs", None):
        files = " ".join(r["file"] for r in result.test_pairs.values())
        return (f"next: mixcse eval {result.output_dir}/best --tasks pairs --pairs-data {files} (AP, accuracy, F1); "
                f"mixcse encode {result.output_dir}/best --input FILE --output emb.npy; your own data: "
                f"docs/domain-adaptation.md")
    return (f"next: mixcse eval {result.output_dir}/best (STS and transfer tasks, docs/evaluation.md), or "
            f"mixcse encode {result.output_dir}/best --input FILE --output emb.npy")


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line as one ``error:`` line (exit 2), like every other bad input."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mixcse", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train an encoder from a YAML recipe")
    p.add_argument("recipe", help="recipe YAML (see recipes/)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="override recipe keys")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty output_dir")
    p.add_argument("--resume", action="store_true", help="continue from output_dir/checkpoint")
    p.set_defaults(func=_train)

    # Imported unconditionally: a broken import must surface as itself, not as "invalid choice: eval".
    from .evaluation.command import add_data_arguments, add_eval_arguments, run_data, run_eval
    from .export import add_export_arguments, run_export
    from .inference_cli import add_encode_arguments, add_search_arguments, run_encode, run_search

    for name, help_text, add_arguments, run in (
            ("eval", "SentEval protocol (STS, transfer, analysis) and retrieval", add_eval_arguments, run_eval),
            ("data", "download benchmark data and the training corpus", add_data_arguments, run_data),
            ("encode", "embed a file of sentences", add_encode_arguments, run_encode),
            ("search", "exact cosine search over a corpus", add_search_arguments, run_search),
            ("export", "write a model folder with its ONNX graph (onnxruntime backend)", add_export_arguments,
             run_export)):
        p = sub.add_parser(name, help=help_text)
        add_arguments(p)
        p.set_defaults(func=run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except MixCSEError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
