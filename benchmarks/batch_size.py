"""Does a big batch help MixCSE? The claims table's recipe at batch 64, 512 and 2048 (more in-batch negatives).

    python benchmarks/batch_size.py --threads 2                       # stand-in and MiniLM, MixCSE, seeds 0-2
    python benchmarks/batch_size.py --backbones standin --presets simcse,mixcse --batch-sizes 64,512
    python benchmarks/batch_size.py --report-only                     # print the table from the JSON

Each run is a claims-table run (benchmarks/claims.py: backbone, learning rate, length 32, τ 0.05, the checkpoint
selected on STS-B dev among the training checkpoints, evaluated once on the 7 STS tasks, STS-B analysis) with only
the batch size changed. Every batch size reads the same sentence stream for about the same number of sentences
(as the SimCSE paper compared batch sizes at one epoch): the table's steps and STS-B dev interval scale by
64 / batch, rounded (MiniLM 200 steps at 64 -> 25 at 512 -> 6 at 2048, stand-in 250 -> 31 -> 8: within one batch,
<= 4%, of the table's 12,800 / 16,000 sentences; learning rate unchanged). A batch above 64 trains with the cached
step (``mini_batch_size``, --mini-batch-size: the memory of a mini-batch), so 2048 fits anywhere. STS only unless
--transfer (then both transfer probes, as the table); fp32 unless --precision bf16.

Results: ``benchmarks/results/batch_size.json``, the cache: a re-run skips recorded runs, so it fills over several
sittings. Weights are deleted after each run unless --keep-weights (a later --transfer sitting then evaluates the
kept ones instead of training again). ``summary``: per (backbone, variant, precision, batch) the STS avg over seeds
and its difference to batch 64 paired by seed (same seed = same sentence order). Batch-64 runs are the table's own
runs: those already in the fp32 claims table (--reuse-from, same key) are copied from it, not trained again.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from pathlib import Path

from benchmarks import claims, claims_report
from benchmarks.common import RESULTS, single_instance

RESULTS_JSON = RESULTS / "batch_size.json"
REUSE_FROM = RESULTS / "paper_claims_fp32.json"
VS_BATCH_64 = claims_report.Paired("", claims_report.sts_avg, judged=False)  # "+0.12 ± 0.30 (n=3); better on ..."


def plan(backbones: list[str], variants: list[str], seeds: list[int], sizes: list[int], mini_batch: int,
         precision: str, transfer: bool, steps: int | None = None) -> list[claims.Spec]:
    """Cheapest backbone first; within it seed by seed, so that every finished seed is a complete comparison. Batch
    64 is the table's own run (one pass); a variant given twice (mixcse, mixcse:0.2) is one job."""
    order = sorted(backbones, key=lambda b: b != "standin")
    jobs = [claims.make_spec(bb, v, seed, steps, "test", precision, transfer, batch,
                             None if batch == claims.TABLE_BATCH or batch <= mini_batch else mini_batch)
            for bb in order for seed in seeds for batch in sizes for v in variants]
    return list({job.key: job for job in jobs}.values())


def reusable(spec: claims.Spec, source: dict) -> dict | None:
    """The record of the same run (same key) in another results file, if it has what this job wants."""
    for r in source["runs"]:
        if claims.run_key(r) == spec.key and (r.get("transfer") is not None or not spec.transfer):
            return r
    return None


def summarise(data: dict) -> list[dict]:
    """Per (backbone, variant, precision, batch, steps): STS avg over seeds, and its difference to batch 64 paired by
    seed. A run of the default length (equal sentences) is compared with the table's batch-64 run; one of --steps N
    with the batch-64 run of N steps."""
    groups: dict[tuple, dict[int, dict]] = {}
    for r in data["runs"]:
        key = (r["backbone"], r["preset"], r.get("lam"), r.get("eval_precision", "fp32"),
               r.get("batch_size", claims.TABLE_BATCH), r["steps"])
        groups.setdefault(key, {})[r["seed"]] = r
    rows = []
    for key in sorted(groups, key=lambda k: (k[0], k[1], k[2] if k[2] is not None else -1, k[3], k[4], k[5])):
        bb, preset, lam, precision, batch, steps = key
        runs = groups[key]
        table_steps = claims.BACKBONES[bb]["steps"]
        base_steps = table_steps if steps == claims.equal_sentences(table_steps, batch) else steps
        base = groups.get((bb, preset, lam, precision, claims.TABLE_BATCH, base_steps), {})
        diffs = claims_report.paired(runs, base, claims_report.sts_avg) if batch != claims.TABLE_BATCH else []
        mean, std, n = claims_report.mean_std([claims_report.sts_avg(r) for r in runs.values()])
        rows.append({"backbone": bb, "preset": preset, "lam": lam, "eval_precision": precision, "batch_size": batch,
                     "steps": steps, "sentences": steps * batch, "n": n, "sts_avg_mean": mean, "sts_avg_std": std,
                     "best_dev_mean": claims_report.mean_std([r.get("best_dev") for r in runs.values()])[0],
                     "sts_avg_minus_batch64": diffs,
                     "sts_avg_minus_batch64_mean": statistics.fmean(diffs) if diffs else None,
                     "sts_avg_minus_batch64_text": claims_report.compare(VS_BATCH_64, runs, base).strip()
                     if diffs else None,
                     "train_seconds_mean": claims_report.mean_std([r.get("train_seconds")
                                                                   for r in runs.values()])[0]})
    return rows


def table(rows: list[dict]) -> str:
    header = ("backbone", "variant", "precision", "batch", "steps", "sentences", "n", "STS avg",
              "− batch 64 (paired by seed)", "train s")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        mean = "--" if r["sts_avg_mean"] is None else f"{r['sts_avg_mean']:.2f}" + (
            f" ± {r['sts_avg_std']:.2f}" if r["sts_avg_std"] is not None else "")
        train = "--" if r["train_seconds_mean"] is None else f"{r['train_seconds_mean']:.0f}"
        lines.append(f"| {r['backbone']} | {claims_report.variant_label(r['preset'], r['lam'])} | "
                     f"{r['eval_precision']} | {r['batch_size']} | {r['steps']} | {r['sentences']:,} | {r['n']} | "
                     f"{mean} | {r['sts_avg_minus_batch64_text'] or '--'} | {train} |")
    return "\n".join(lines)


def write_summary(path: Path, settings: dict) -> dict:
    """The study's own settings (record_run wrote the table's) and the summary."""
    return claims.save_results(path, lambda data: data.__setitem__("summary", summarise(data)), settings)


def _load(path: Path, ap: argparse.ArgumentParser) -> dict:
    try:
        return claims.load_results(path)
    except (OSError, ValueError) as e:
        ap.error(f"cannot read {path}: {e}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Does a big batch help MixCSE? (claims recipe, equal sentences)")
    ap.add_argument("--backbones", nargs="+", default=["standin,minilm"])
    ap.add_argument("--presets", nargs="+", default=["mixcse"], help='variants, e.g. "simcse,mixcse,mixcse:0.5"')
    ap.add_argument("--batch-sizes", nargs="+", default=["64,512,2048"])
    ap.add_argument("--mini-batch-size", type=int, default=64,
                    help="chunk of the cached step for every batch above 64 (memory only)")
    ap.add_argument("--seeds", nargs="+", default=["0,1,2"])
    ap.add_argument("--steps", type=int, default=None, help="steps for every run (default: equal sentences)")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--transfer", action="store_true", help="also the transfer tasks, both probes (~10 min a run)")
    ap.add_argument("--threads", type=int, default=claims.THREADS)
    ap.add_argument("--eval-workers", type=int, default=1)
    ap.add_argument("--keep-weights", action="store_true")
    ap.add_argument("--results", type=Path, default=RESULTS_JSON)
    ap.add_argument("--reuse-from", type=Path, default=None,
                    help=f"a claims results file whose runs of the same key are copied instead of trained (default "
                         f"{REUSE_FROM.relative_to(RESULTS.parents[1])} when it exists)")
    ap.add_argument("--no-reuse", action="store_true", help="train every run here")
    ap.add_argument("--report-only", action="store_true", help="print the table from the results file; no writes")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    if args.report_only:
        if not args.results.exists():
            ap.error(f"no results file {args.results}")
        print(table(summarise(_load(args.results, ap))))
        return 0
    backbones, variants = claims.split_values(args.backbones), claims.split_values(args.presets)
    try:
        seeds = [int(s) for s in claims.split_values(args.seeds)]
        sizes = [int(s) for s in claims.split_values(args.batch_sizes)]
    except ValueError:
        ap.error("--seeds and --batch-sizes take whole numbers")
    if unknown := [b for b in backbones if b not in claims.BACKBONES]:
        ap.error(f"unknown backbone {unknown[0]!r}; choose from {', '.join(claims.BACKBONES)}")
    if claims.variant_error(variants):
        ap.error(claims.variant_error(variants))
    steps_ok = args.steps is None or args.steps >= 1
    if min([args.threads, args.eval_workers, args.mini_batch_size, *sizes]) < 1 or not steps_ok:
        ap.error("--threads, --eval-workers, --mini-batch-size, --steps and the batch sizes must be >= 1")
    if bad := [n for n in sizes if n > max(args.mini_batch_size, claims.TABLE_BATCH) and n % args.mini_batch_size]:
        ap.error(f"--mini-batch-size {args.mini_batch_size} does not divide batch size {bad[0]}")
    reuse = None if args.no_reuse else (args.reuse_from or (REUSE_FROM if REUSE_FROM.exists() else None))
    if args.reuse_from and not args.reuse_from.is_file():
        ap.error(f"--reuse-from {args.reuse_from}: no such file")
    if reuse is not None and reuse.resolve() == args.results.resolve():
        ap.error("--results and --reuse-from are the same file; batch-size runs stay out of the claims table")
    claims.COMMON["num_threads"] = args.threads
    for cfg in claims.BACKBONES.values():
        cfg["precision"] = args.precision
    jobs = plan(backbones, variants, seeds, sizes, args.mini_batch_size, args.precision, args.transfer, args.steps)
    data = _load(args.results, ap)
    source = _load(reuse, ap) if reuse is not None else {"runs": []}
    pending = [job for _, job in claims.pending_jobs([("run", j) for j in jobs], data, "test", args.precision)]
    copies = [job for job in pending if reusable(job, source)]
    print(f"[batch_size] {len(jobs)} runs: {len(jobs) - len(pending)} recorded, {len(copies)} to copy from "
          f"{reuse.name if reuse else '--'}, {len(pending) - len(copies)} to train", flush=True)
    if args.dry_run:
        for job in jobs:
            state = "done " if job not in pending else ("copy " if job in copies else "train")
            print(f"  {state}  {job.name}")
        return 0
    if not single_instance(claims.CACHE / "paper_claims.lock", "batch_size"):  # one run at a time, either script
        return 2
    import torch

    torch.set_num_threads(args.threads)
    settings = {"recipe": "benchmarks/claims.py (the claims table), batch size varied, equal sentences",
                "backbones": {bb: {**claims.BACKBONES[bb], **claims.COMMON} for bb in backbones},
                "batch_sizes": sizes, "mini_batch_size": args.mini_batch_size, "precision": args.precision,
                "steps": args.steps or "equal sentences (64 / batch × the table's)", "transfer": args.transfer}
    failures = 0
    for i, job in enumerate(pending, 1):
        if job in copies:
            claims.record_run(args.results, {**reusable(job, source), "reused_from": reuse.name}, job.key)
            print(f"[batch_size] ({i}/{len(pending)}) {job.name}: copied from {reuse.name}", flush=True)
            continue
        print(f"[batch_size] ({i}/{len(pending)}) {job.name}: start {time.strftime('%H:%M:%S')}", flush=True)
        try:
            record = claims.train_and_evaluate(job, args.eval_workers)
            claims.record_run(args.results, record, job.key)
        except KeyboardInterrupt:
            raise
        except Exception:  # retried next time (a run killed in its final evaluation is not trained again)
            failures += 1
            traceback.print_exc()
            continue
        if not args.keep_weights:
            claims.cleanup_weights(job)
        print(f"[batch_size] recorded {job.name}: STS avg {record['sts']['avg']:.2f}, best step "
              f"{record['best_step']}, train {record['train_seconds']:.0f} s", flush=True)
    if args.results.exists():
        print(table(write_summary(args.results, settings)["summary"]), flush=True)
    print(f"[batch_size] finished; {failures} failed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
