"""Does the MixCSE − SimCSE gap depend on training length? A diagnostic for the claims benchmark (issue 6).

The CPU claims runs train all-MiniLM-L6-v2 for 200 steps. This probe trains SimCSE and MixCSE for longer (default
1,000 steps, STS-B dev every 125 as in the paper), same seeds = same data order, selects each run's checkpoint on
STS-B dev only, and evaluates it on the 7 STS tasks (no transfer tasks: this is a diagnostic, sized for a few
minutes of a GPU). Prints a table and writes every figure and the dev curves to --out (JSON), after every run.

    python benchmarks/steps_probe.py --model MINILM_DIR --corpus SENTENCES.txt.gz --data DOWNSTREAM --out probe.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--data", required=True, help="SentEval layout with STS12-16, STSBenchmark, SICK")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--presets", nargs="+", default=["simcse", "mixcse"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--eval-steps", type=int, default=125)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--pooler", default="avg")
    args = ap.parse_args()

    import mixcse
    from mixcse.evaluation import evaluate

    records = []
    for seed in args.seeds:
        for preset in args.presets:
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                result = mixcse.train({
                    "model": args.model, "train_file": args.corpus, "data_dir": args.data, "output_dir": tmp,
                    "loss": preset, "seed": seed, "pooler": args.pooler, "learning_rate": args.lr,
                    "batch_size": 64, "max_seq_length": 32, "max_steps": args.steps, "eval_steps": args.eval_steps,
                    "precision": "auto", "log_steps": 25}, overwrite=True, progress=False)
                train_s = time.perf_counter() - t0
                curve = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
                res = evaluate(str(Path(tmp) / "best"), tasks="sts", data_dir=args.data, batch_size=256,
                               verbose=False)
            sts = {t: v["spearman"] for t, v in res["sts"].items() if t != "avg"}
            sts["avg"] = res["sts"]["avg"]
            records.append({"preset": preset, "seed": seed, "steps": args.steps, "best_step": result.best_step,
                            "raw_dev": result.raw_dev, "best_dev": result.best_dev, "sts": sts,
                            "train_seconds": train_s,
                            "dev_curve": [(r["step"], r["stsb_dev"]) for r in curve if "stsb_dev" in r],
                            "loss_curve": [(r["step"], r["loss"]) for r in curve if "loss" in r]})
            print(f"{preset:8s} seed {seed}: dev {result.raw_dev:.2f} -> {result.best_dev:.2f} @ {result.best_step}, "
                  f"STS avg {sts['avg']:.2f} ({train_s:.0f} s)", flush=True)
            args.out.write_text(json.dumps({"settings": vars(args) | {"out": str(args.out)}, "runs": records},
                                           indent=1))
    for preset in args.presets:
        avgs = [r["sts"]["avg"] for r in records if r["preset"] == preset]
        print(f"{preset:8s} STS avg {statistics.fmean(avgs):.2f} over {len(avgs)} seeds")


if __name__ == "__main__":
    main()
