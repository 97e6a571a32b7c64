"""``mixcse train RECIPE [key=value ...]``: train from a recipe, then one report of what the run gave."""

from __future__ import annotations

import argparse
import os
import sys


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipe", help="recipe YAML (see recipes/)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="override recipe keys")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty output_dir")
    p.add_argument("--resume", action="store_true", help="continue from output_dir/checkpoint")


def run_train(args: argparse.Namespace) -> int:
    from mixcse.training.config import load_recipe
    from mixcse.training.trainer import train

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


def metric_name(result) -> str:
    """The selector's label ("STS-B dev", "dev pairs AP"), as the run recorded it."""
    return getattr(result, "select_label", None) or result.select_metric or "selection metric (none)"


def _report(result) -> None:
    fmt = lambda x: "n/a" if x is None else f"{x:.2f}"  # noqa: E731
    metric = metric_name(result)
    print(f"start {metric} {fmt(result.raw_dev)} -> best {fmt(result.best_dev)} at step {result.best_step}; "
          f"{result.steps} steps in {result.train_seconds:.1f}s ({result.sentences_per_second:.1f} sentences/s)"
          + (f", {wall:.0f}s wall in all" if (wall := getattr(result, "wall_seconds", None)) is not None else "")
          + f"; model in {result.output_dir}/best")
    for name, report in (getattr(result, "levers", None) or {}).items():
        print(f"lever {name}: {report.get('text') or ''}")
    if getattr(result, "best_alpha", None) not in (None, 1.0):
        print(f"best/ is the blend {result.best_alpha:g} x the step-{result.best_step} checkpoint + "
              f"{1 - result.best_alpha:g} x the start model")
    for guard in getattr(result, "guards", None) or []:
        refused = ", ".join(f"step {c['step']}" + (f" blend {c['alpha']:g}" if c["alpha"] != 1.0 else "")
                            for c in guard["refused"])
        print(f"guard {guard['metric']} (tolerance {guard['tolerance']:g}), start -> best: {fmt(guard['start'])} -> "
              f"{fmt(guard['best'])}" + (f"; refused: {refused}" if refused else "; refused: none"))
    if getattr(result, "test_pairs", None):
        print("held-out pairs (never used for selection), start -> best: " + "; ".join(
            f"{name} {r['metric'].upper() if r['metric'] == 'ap' else r['metric']} {fmt(r['start'])} -> "
            f"{fmt(r['best'])}" + (f" ({r['best'] - r['start']:+.2f})" if r["start"] is not None else "")
            + (f", F1 at the dev threshold {fmt(r.get('f1_start'))} -> {fmt(r['f1_best'])}"
               if r.get("f1_best") is not None else "")
            for name, r in result.test_pairs.items()))
    print(_next_step(result))


def _next_step(result) -> str:
    """One line on what the selection number means and what to run next, so a first run is not misread."""
    if result.select_metric is not None and result.best_step == 0 and getattr(result, "guards", None) and \
            not (result.decision or "").startswith("no step beat"):
        return (f"note: best/ is the start model: {result.decision}. Blends with the start model are searched when "
                f"a guard refuses a checkpoint (unless interpolate: none); a looser guard_tolerance, a lower "
                f"learning_rate or fewer steps forget less (docs/domain-adaptation.md)")
    if result.select_metric is not None and result.best_step == 0:
        hint = getattr(result, "start_won_hint", None)
        return (f"note: no training step beat the start model on {metric_name(result)}, so best/ is the start model"
                + (f". {hint}" if hint else "; docs/domain-adaptation.md says when adaptation does not help and what "
                                            "to try"))
    if getattr(result, "test_pairs", None):
        files = " ".join(r["file"] for r in result.test_pairs.values())
        return (f"next: mixcse eval {result.output_dir}/best --tasks pairs --pairs-data {files} (AP, accuracy, F1); "
                f"mixcse encode {result.output_dir}/best --input FILE --output emb.npy; your own data: "
                f"docs/domain-adaptation.md")
    return (f"next: mixcse eval {result.output_dir}/best (STS and transfer tasks, docs/evaluation.md), or "
            f"mixcse encode {result.output_dir}/best --input FILE --output emb.npy")
