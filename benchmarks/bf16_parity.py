"""bf16 autocast vs fp32 on CPU: training speed and STS-B dev parity.

Speed: one process, the CPU recipe's step (recipes/cpu/mixcse-mini.yaml: stand-in backbone, cls pooler + MLP head,
MixCSE loss, batch 64 x 2 views, length 32, 2 threads): an fp32 step and a bf16-autocast step (the trainer's
``torch.autocast("cpu", dtype=torch.bfloat16)`` around the forward; the loss upcasts to fp32) alternate on the same
model, optimizer and batch; the figure is the median per-round ratio of step times fp32 / bf16.

Quality: the recipe itself, shortened to ``--steps`` (default 125, one STS-B dev evaluation at the end through the
trainer's evaluator, ``mixcse.evaluation.stsb_dev_spearman``), for 2 seeds x {fp32, bf16}, run alternately
(seed 42 fp32, seed 42 bf16, seed 43 fp32, ...). Parity criterion: the fp32-vs-bf16 gap of the seed means is
within seed noise if it is no larger than the seed-to-seed spread within a precision.

    python benchmarks/bf16_parity.py            # speed + 4 recipe runs of 125 steps (long: run in the background)
    python benchmarks/bf16_parity.py --quick    # speed only, 2 rounds
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from benchmarks import common  # noqa: F401
from benchmarks.common import (
    CORPUS,
    DOWNSTREAM,
    REPO,
    STAND_IN,
    interleaved,
    paired_ratios,
    recipe_step_setup,
    summarise,
    write_result,
)


def speed(rounds: int, threads: int) -> dict:
    from mixcse.losses import PRESETS
    from mixcse.training.step import make_step

    cfg, ctx, encoder, batch, optimizer = recipe_step_setup(threads)
    steps = {precision: make_step(cfg, ctx, encoder, optimizer, PRESETS["mixcse"], precision=precision)
             for precision in ("fp32", "bf16")}

    def step(precision):
        return lambda: steps[precision](batch)

    times = interleaved({"fp32": step("fp32"), "bf16": step("bf16")}, repeats=rounds, warmup=1)
    ratio = paired_ratios(times["fp32"], times["bf16"])
    return {"rounds": rounds, "threads": threads, "fp32_step_s": summarise(times["fp32"]),
            "bf16_step_s": summarise(times["bf16"]), "speedup_bf16": summarise(ratio),
            "raw": {**times, "speedup": ratio}}


def quality(steps: int, seeds: list[int], threads: int) -> dict:
    import mixcse
    from mixcse.training.rundir import MetricsLog

    recipe = yaml.safe_load((REPO / "recipes/cpu/mixcse-mini.yaml").read_text())
    workdir = Path(tempfile.mkdtemp(prefix="mixcse-bf16-"))
    runs = []
    try:
        for i, seed in enumerate(seeds):
            for precision in ("fp32", "bf16"):
                cfg = {**recipe, "model": str(STAND_IN), "train_file": str(CORPUS), "data_dir": str(DOWNSTREAM),
                       "output_dir": str(workdir / f"{precision}-{seed}"), "max_steps": steps, "eval_steps": steps,
                       "seed": seed, "precision": precision, "num_threads": threads}
                t0 = time.perf_counter()
                with contextlib.redirect_stdout(io.StringIO()):
                    result = mixcse.train(cfg, overwrite=True, progress=False)
                wall = time.perf_counter() - t0
                # the trained model's score (best_dev may be the start model's, which is always a candidate)
                final = [r for r in MetricsLog(Path(result.output_dir) / "metrics.jsonl").records() if "stsb_dev" in r]
                run = {"seed": seed, "precision": precision, "stsb_dev": final[-1]["stsb_dev"],
                       "raw_dev": result.raw_dev,
                       "train_seconds": result.train_seconds, "sentences_per_second": result.sentences_per_second,
                       "wall_s": wall}
                runs.append(run)
                print(f"  seed {seed} {precision}: STS-B dev {result.best_dev:.2f} after {steps} steps "
                      f"({result.sentences_per_second:.1f} sentences/s in the loop, {wall:.0f} s wall)", flush=True)
                shutil.rmtree(workdir / f"{precision}-{seed}", ignore_errors=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    by = {p: [r["stsb_dev"] for r in runs if r["precision"] == p] for p in ("fp32", "bf16")}
    mean = {p: float(np.mean(v)) for p, v in by.items()}
    seed_spread = max(max(v) - min(v) for v in by.values())
    paired_gaps = [b - f for f, b in zip(by["fp32"], by["bf16"])]
    gap = mean["bf16"] - mean["fp32"]
    raw = next((r["raw_dev"] for r in runs if r["raw_dev"] is not None), None)
    return {"steps": steps, "seeds": seeds, "runs": runs, "mean_dev": mean, "bf16_minus_fp32": gap,
            "paired_gaps_same_seed": paired_gaps, "seed_spread_within_precision": seed_spread,
            "within_seed_noise": abs(gap) <= seed_spread, "raw_model_dev": raw}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="speed only, 2 rounds")
    parser.add_argument("--rounds", type=int, help="speed rounds (default 10, quick 2)")
    parser.add_argument("--steps", type=int, default=125, help="steps of each quality run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    from mixcse.training.trainer import cpu_supports_bf16, resolve_precision

    t_start = time.perf_counter()
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    isa = {f: f" {f}" in flags for f in ("avx512_bf16", "amx_bf16", "amx_tile", "avx512f")}
    auto = resolve_precision("auto", torch.device("cpu"))
    print(f"CPU: {common.cpu_model()}; {', '.join(f'{k}={v}' for k, v in isa.items())}; "
          f"cpu_supports_bf16()={cpu_supports_bf16()}; precision auto -> {auto}")
    rounds = args.rounds or (2 if args.quick else 10)
    print(f"speed: CPU recipe step, fp32 vs bf16 autocast, {rounds} interleaved rounds, {args.threads} threads")
    sp = speed(rounds, args.threads)
    print(f"  fp32 {sp['fp32_step_s']['median']:.3f} s/step, bf16 {sp['bf16_step_s']['median']:.3f} s/step; "
          f"per-round speed-up median x{sp['speedup_bf16']['median']:.2f} "
          f"[IQR {sp['speedup_bf16']['q1']:.2f}-{sp['speedup_bf16']['q3']:.2f}]", flush=True)
    payload = {"mode": "quick" if args.quick else "default", "isa": isa, "cpu_supports_bf16": cpu_supports_bf16(),
               "auto_resolves_to": auto, "speed": sp, "speedup_bf16": sp["speedup_bf16"]["median"]}
    if not args.quick:
        print(f"quality: recipes/cpu/mixcse-mini.yaml, {args.steps} steps, seeds {args.seeds}, fp32 and bf16:")
        q = quality(args.steps, args.seeds, args.threads)
        print(f"  mean STS-B dev fp32 {q['mean_dev']['fp32']:.2f}, bf16 {q['mean_dev']['bf16']:.2f} "
              f"(gap {q['bf16_minus_fp32']:+.2f}; seed spread within a precision "
              f"{q['seed_spread_within_precision']:.2f})"
              f" -> {'within' if q['within_seed_noise'] else 'OUTSIDE'} seed noise")
        payload["quality"] = q
        payload["within_seed_noise"] = q["within_seed_noise"]
    payload["wall_s"] = time.perf_counter() - t_start
    if not args.no_write:
        write_result("bf16_parity", payload)


if __name__ == "__main__":
    main()
