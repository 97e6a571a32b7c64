"""Do the claims-table gaps depend on training length or on the seed? A GPU-sized diagnostic for issue 6.

The CPU claims runs train all-MiniLM-L6-v2 for 200 steps over 3 seeds. This probe trains the chosen presets for
any number of steps and seeds (same seed = same data order across presets), selects each run's checkpoint on STS-B
dev only, and evaluates it on the 7 STS tasks (no transfer tasks: sized for minutes of a GPU). It prints a markdown
table (mean ± std per preset; each preset minus the first paired by seed with a t-test, Levene's test for the spread;
claims_report.probe_section, which also puts these files in docs/results.md) and writes every figure and the dev
curves to --out (JSON) after every run.

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
idle); a record is computed as in a sequential run.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from claims_report import parse_variant, probe_section


def train_config(cfg: dict, variant: str, seed: int, output_dir: str) -> dict:
    """The trainer's config for one run. A variant is a preset name, optionally with λ: "mixcse:0.5"."""
    preset, lam = parse_variant(variant)
    return {"model": cfg["model"], "train_file": cfg["corpus"], "data_dir": cfg["data"], "output_dir": output_dir,
            "loss": preset, "lam": lam, "seed": seed, "pooler": cfg["pooler"],
            "learning_rate": cfg["lr"], "batch_size": 64, "max_seq_length": 32, "max_steps": cfg["steps"],
            "eval_steps": cfg["eval_steps"], "precision": "auto", "log_steps": 25, "num_threads": cfg["threads"]}


def run_one(cfg: dict, variant: str, seed: int) -> dict:
    """Train one (variant, seed), select on STS-B dev, evaluate the selected checkpoint on the STS tasks."""
    import mixcse
    from mixcse.evaluation import evaluate

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        result = mixcse.train(train_config(cfg, variant, seed, tmp), overwrite=True, progress=False)
        train_s = time.perf_counter() - t0
        curve = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
        res = evaluate(str(Path(tmp) / "best"), tasks="sts", data_dir=cfg["data"], batch_size=256, verbose=False)
    sts = {t: v["spearman"] for t, v in res["sts"].items() if t != "avg"}
    sts["avg"] = res["sts"]["avg"]
    return {"preset": variant, "seed": seed, "steps": cfg["steps"], "best_step": result.best_step,
            "raw_dev": result.raw_dev, "best_dev": result.best_dev, "sts": sts, "train_seconds": train_s,
            "dev_curve": [(r["step"], r["stsb_dev"]) for r in curve if "stsb_dev" in r],
            "loss_curve": [(r["step"], r["loss"]) for r in curve if "loss" in r]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--data", required=True, help="SentEval layout with STS12-16, STSBenchmark, SICK")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--presets", nargs="+", default=["simcse", "mixcse"],
                    help='presets, each optionally with λ ("mixcse:0.5"); the first is the paired reference')
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--eval-steps", type=int, default=125)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--pooler", default="avg")
    ap.add_argument("--jobs", type=int, default=1, help="trainings at once, in spawned processes")
    args = ap.parse_args()
    if args.jobs < 1:
        ap.error("--jobs must be >= 1")
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    cfg = {"model": args.model, "corpus": args.corpus, "data": args.data, "pooler": args.pooler, "lr": args.lr,
           "steps": args.steps, "eval_steps": args.eval_steps, "threads": threads}
    todo = [(preset, seed) for seed in args.seeds for preset in args.presets]
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
        for preset, seed in todo:
            record(run_one(cfg, preset, seed))
    else:
        import multiprocessing

        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            for fut in as_completed([pool.submit(run_one, cfg, p, s) for p, s in todo]):
                record(fut.result())
    print("\n".join(probe_section({"runs": records})))
    print(f"{len(records)} runs in {time.perf_counter() - t_all:.0f} s wall, {args.jobs} at once")


if __name__ == "__main__":
    main()
