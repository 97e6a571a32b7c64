"""Do the claims-table gaps depend on training length or on the seed? A GPU-sized diagnostic.

The CPU claims runs train all-MiniLM-L6-v2 for 200 steps over 3 seeds. This probe trains the chosen variants (a
preset, optionally with λ: "mixcse:0.5") for any number of steps and seeds (same seed = same data order across
variants), selects each run's checkpoint on STS-B dev only, and evaluates it on the 7 STS tasks (no transfer tasks:
sized for minutes of a GPU). It prints a markdown table (mean ± std per variant; each variant minus the first paired
by seed with a t-test, Levene's test for the spread; claims_report.probe_section, which also puts these files in
docs/results.md) and writes every figure and the dev curves to --out (JSON) after every run. Harness:
benchmarks/claims.py (the same train configs and variant syntax as paper_claims.py).

    # 2026-11-29, H200: does the gap grow with steps?         -> benchmarks/results/steps_probe_gpu.json
    python benchmarks/steps_probe.py --model D/minilm --corpus D/corpus.txt.gz --data D/downstream --out probe.json
    # 2026-11-30, H200: the CPU tables' recipes over 10 seeds -> seeds_probe_gpu.json, seeds_probe_standin_gpu.json
    python benchmarks/steps_probe.py ... --steps 200 --eval-steps 25 --seeds 0 1 2 3 4 5 6 7 8 9 \
        --presets simcse mixcse mixcse-single mixcse-wo-sg --jobs 10
    python benchmarks/steps_probe.py --model D/standin ... --steps 250 --eval-steps 25 --lr 3e-5 --pooler cls \
        --seeds 0 1 2 3 4 5 6 7 8 9 --presets simcse mixcse mixcse-single mixcse-wo-sg --jobs 12
    # 2026-11-30, H200: λ, the bound, the released code's loss, against MixCSE -> lambda_probe_gpu.json
    python benchmarks/steps_probe.py ... --steps 200 --eval-steps 25 --seeds 0 1 2 3 4 5 6 7 8 9 \
        --presets mixcse mixcse:0.1 mixcse:0.3 mixcse:0.5 mixcse-released mixcse-bound --jobs 12

D is what travelled to the GPU machine (64 MiB at most): minilm = all-MiniLM-L6-v2 saved in fp16, standin =
../shared/models/mini-wiki-mlm as is, corpus.txt.gz = the first 100,000 lines of the shared corpus, downstream = its
STS and SICK folders. --jobs N runs N trainings at once in spawned processes (one small model leaves a GPU mostly
idle); a record is computed as in a sequential run. --presets and --seeds also take commas ("0,1,2").
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from benchmarks.claims import probe_base, probe_run, split_values, variant_error
from benchmarks.claims_report import probe_section


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--data", required=True, help="SentEval layout with STS12-16, STSBenchmark, SICK")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--presets", nargs="+", default=["simcse", "mixcse"],
                    help='presets, each optionally with λ ("mixcse:0.5"); the first is the paired reference')
    ap.add_argument("--seeds", nargs="+", default=[0, 1])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--eval-steps", type=int, default=125)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--pooler", default="avg")
    ap.add_argument("--jobs", type=int, default=1, help="trainings at once, in spawned processes")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error("--jobs must be >= 1")
    args.presets = split_values(args.presets)
    if variant_error(args.presets):
        ap.error(variant_error(args.presets))
    try:
        args.seeds = [int(s) for s in split_values([str(s) for s in args.seeds])]
    except ValueError:
        ap.error(f"--seeds takes whole numbers, not {' '.join(map(str, args.seeds))!r}")
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    base = probe_base(args.model, args.corpus, args.data, args.pooler, args.lr, args.steps, args.eval_steps, threads)
    todo = [(variant, seed) for seed in args.seeds for variant in args.presets]
    records: list[dict] = []
    t_all = time.perf_counter()

    def record(rec: dict) -> None:
        records.append(rec)
        print(f"{rec['preset']:14s} seed {rec['seed']}: dev {rec['raw_dev']:.2f} -> {rec['best_dev']:.2f} "
              f"@ {rec['best_step']}, STS avg {rec['sts']['avg']:.2f} ({rec['train_seconds']:.0f} s)", flush=True)
        records.sort(key=lambda r: (r["seed"], args.presets.index(r["preset"])))
        args.out.write_text(json.dumps({"settings": vars(args) | {"out": str(args.out), "threads": threads},
                                        "wall_seconds": time.perf_counter() - t_all, "runs": records}, indent=1))

    if args.jobs == 1:
        for variant, seed in todo:
            record(probe_run(base, variant, seed))
    else:
        import multiprocessing

        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            for fut in as_completed([pool.submit(probe_run, base, v, s) for v, s in todo]):
                record(fut.result())
    print("\n".join(probe_section({"runs": records})))
    print(f"{len(records)} runs in {time.perf_counter() - t_all:.0f} s wall, {args.jobs} at once")


if __name__ == "__main__":
    main()
