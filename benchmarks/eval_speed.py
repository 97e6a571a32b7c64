"""Time a full evaluation on the plain reference paths and on the fast ones, side by side in one run.

all-MiniLM-L6-v2, all 14 tasks + analysis, test mode, SentEval's data (../shared/data/downstream), no cache:
  1. `evaluate(workers=2)`: shared rows on parallel threads, the fast engine, probes in 2 processes;
  2. the sklearn-converged probe on those embeddings (from the run's cache), reference engine then fast engine,
     each in one process;
  3. `evaluate(reference=True)`: unit-by-unit encoding, the senteval-pytorch probe's reference engine, one
     process.
The JSON is written after stages 2 and 3 ("complete": false until the end).
Checks that the two runs' embeddings are bit-identical (their cached unit files), and compares every score.

    python benchmarks/eval_speed.py                  # ~15-20 min on 2 vCPUs
    python benchmarks/eval_speed.py --tasks STS13,CR,TREC --no-write   # a quick look
    python benchmarks/eval_speed.py --precisions --tasks sts   # fp32 vs bf16 autocast, the fast path, in one run

``--precisions`` writes benchmarks/results/eval_precision.json instead: the same evaluation at fp32 and at bf16
(``mixcse eval --precision bf16``), alternating over ``--rounds``, with the wall and encoding seconds of each, their
ratios, and the largest score differences.
"""
from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import DOWNSTREAM, minilm_path, write_result
from mixcse.evaluation import evaluate
from mixcse.utils.tables import STS_TASKS, TRANSFER_TASKS


def timed_eval(label: str, model, tasks: str, **kw) -> tuple[dict, float]:
    t0 = time.perf_counter()
    res = evaluate(model, tasks=tasks, data_dir=DOWNSTREAM, verbose=False, **kw)
    wall = time.perf_counter() - t0
    print(f"{label}: {wall:.1f} s  ({', '.join(f'{k} {v:.1f}' for k, v in res['settings']['seconds'].items())})",
          flush=True)
    return res, wall


def phases(res: dict) -> dict:
    sec = res["settings"]["seconds"]
    out = {"load_data": sec.get("load_data", 0.0), "encode": sec.get("encode", 0.0),
           "sts_and_analysis": sum(sec.get(t, 0.0) for t in STS_TASKS + ("analysis",)), "total": sec["total"]}
    # what is left is the transfer probes (with worker processes their per-task times overlap: not a sum)
    out["transfer"] = out["total"] - out["load_data"] - out["encode"] - out["sts_and_analysis"]
    return out


def sts_scores(res: dict) -> dict:
    return {t: v["spearman"] for t, v in res.get("sts", {}).items() if t != "avg"}


def transfer_scores(res: dict) -> dict:
    return {t: v["acc"] for t, v in res.get("transfer", {}).items() if t != "avg"}


def transfer_side(res: dict) -> dict:
    sec = res["settings"]["seconds"]
    return {"seconds": {t: sec[t] for t in TRANSFER_TASKS if t in sec}, "acc": transfer_scores(res),
            "chosen_reg": {t: v.get("chosen_reg") for t, v in res.get("transfer", {}).items() if t != "avg"}}


def max_diff(a: dict, b: dict) -> float:
    return max((abs(a[k] - b[k]) for k in a if k in b), default=0.0)


def same_units(a: Path, b: Path) -> bool:
    files = sorted(p.relative_to(a) for p in a.rglob("unit-*.npy"))
    return bool(files) and files == sorted(p.relative_to(b) for p in b.rglob("unit-*.npy")) and \
        all(np.array_equal(np.load(a / f), np.load(b / f)) for f in files)


def report(model_tasks: list[str], workers: int, plain, plain_wall, fast, fast_wall, identical_embeddings,
           sk_plain, sk_fast) -> dict:
    payload: dict = {"model": "all-MiniLM-L6-v2", "tasks": model_tasks, "mode": "test",
                     "protocol": "senteval-pytorch (the default)", "workers": {"reference": 1, "fast": workers},
                     "complete": plain is not None and sk_plain is not None}
    if sk_plain is not None:
        a, b = transfer_side(sk_plain), transfer_side(sk_fast)
        total_a, total_b = sum(a["seconds"].values()), sum(b["seconds"].values())
        payload["sklearn_converged"] = {
            "speedup_probes": round(total_a / total_b, 3),
            "max_abs_diff_transfer": round(max_diff(a["acc"], b["acc"]), 4),
            "probe_seconds": {"reference": round(total_a, 2), "fast": round(total_b, 2)},
            "reference": a, "fast": b}
        print(f"sklearn-converged probes: {total_a:.1f} s -> {total_b:.1f} s "
              f"({payload['sklearn_converged']['speedup_probes']}x), largest difference "
              f"{payload['sklearn_converged']['max_abs_diff_transfer']} points", flush=True)
    p_fast = phases(fast)
    payload["fast"] = {"wall_seconds": round(fast_wall, 2), "phases_seconds": p_fast,
                       "encoding": fast["settings"]["encoding"],
                       "sts": sts_scores(fast), **transfer_side(fast),
                       "cpu_seconds": fast["settings"]["cpu_seconds"]}
    if plain is None:
        return payload
    sts_plain = sts_scores(plain)
    sts_fast = payload["fast"]["sts"]
    sts_equal = all(sts_plain[t] == sts_fast[t] or (math.isnan(sts_plain[t]) and math.isnan(sts_fast[t]))
                    for t in sts_plain)
    p_plain = phases(plain)
    payload.update({
        "speedup_end_to_end": round(plain_wall / fast_wall, 3),
        "max_abs_diff_transfer": round(max_diff(transfer_scores(plain), transfer_scores(fast)), 4),
        "sts_identical": sts_equal,
        "embeddings_identical": identical_embeddings,
        "wall_seconds": {"reference": round(plain_wall, 2), "fast": round(fast_wall, 2)},
        "speedup_per_phase": {k: round(p_plain[k] / p_fast[k], 3) for k in ("encode", "transfer", "total")
                              if p_fast[k] > 0},
        "reference": {"wall_seconds": round(plain_wall, 2), "phases_seconds": p_plain,
                      "encoding": plain["settings"]["encoding"], "sts": sts_plain, **transfer_side(plain),
                      "cpu_seconds": plain["settings"]["cpu_seconds"]},
    })
    print(f"end to end: {plain_wall:.1f} s -> {fast_wall:.1f} s ({payload['speedup_end_to_end']}x); "
          f"STS identical: {sts_equal}; embeddings identical: {identical_embeddings}; "
          f"largest transfer difference: {payload['max_abs_diff_transfer']} points", flush=True)
    return payload


def compare_precisions(model, tasks: str, workers: int, rounds: int) -> dict:
    """The fast path at fp32 and at bf16, alternating (a load change hits both), medians of the seconds."""
    import statistics

    runs: dict[str, list] = {"fp32": [], "bf16": []}
    for _ in range(rounds):
        for precision in runs:
            res, wall = timed_eval(f"{precision}, end to end", model, tasks, workers=workers, precision=precision)
            runs[precision].append((res, wall))
    side = {}
    for precision, done in runs.items():
        res = done[-1][0]
        side[precision] = {"wall_seconds": [round(w, 2) for _, w in done],
                           "encode_seconds": [round(r["settings"]["seconds"]["encode"], 2) for r, _ in done],
                           "sts": sts_scores(res), "acc": transfer_scores(res)}
    med = {p: {k: statistics.median(side[p][k]) for k in ("wall_seconds", "encode_seconds")} for p in side}
    payload = {"model": "all-MiniLM-L6-v2", "tasks": runs["fp32"][0][0]["settings"]["tasks"], "mode": "test",
               "rounds": rounds, "workers": workers,
               "speedup_end_to_end_bf16_vs_fp32": round(med["fp32"]["wall_seconds"] / med["bf16"]["wall_seconds"], 3),
               "speedup_encode_bf16_vs_fp32": round(med["fp32"]["encode_seconds"] / med["bf16"]["encode_seconds"], 3),
               "max_abs_diff_sts": round(max_diff(side["fp32"]["sts"], side["bf16"]["sts"]), 4),
               "max_abs_diff_transfer": round(max_diff(side["fp32"]["acc"], side["bf16"]["acc"]), 4), **side}
    print(f"bf16 vs fp32: end to end {payload['speedup_end_to_end_bf16_vs_fp32']}x, encoding "
          f"{payload['speedup_encode_bf16_vs_fp32']}x; largest STS difference {payload['max_abs_diff_sts']}, "
          f"transfer {payload['max_abs_diff_transfer']} points", flush=True)
    return payload


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="all")
    ap.add_argument("--workers", type=int, default=2, help="transfer probe processes on the fast side (the "
                    "reference side runs in one process, as the plain path does); default 2")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--precisions", action="store_true", help="fp32 vs bf16 on the fast path (eval_precision.json)")
    ap.add_argument("--rounds", type=int, default=1, help="with --precisions: alternating rounds of each")
    args = ap.parse_args()
    model = minilm_path()
    if args.precisions:
        payload = compare_precisions(model, args.tasks, args.workers, args.rounds)
        if not args.no_write:
            write_result("eval_precision", payload)
        return

    def save(*parts):  # after every stage, so that a cut-off run still leaves its figures
        payload = report(fast["settings"]["tasks"], args.workers, *parts)
        if not args.no_write:
            write_result("eval_speed", payload)

    with tempfile.TemporaryDirectory() as tmp:
        ref_cache, fast_cache = Path(tmp) / "reference", Path(tmp) / "fast"
        # the fast side first: the sklearn-converged comparison reads its cached embeddings
        fast, fast_wall = timed_eval("fast, end to end", model, args.tasks, cache_dir=fast_cache,
                                     workers=args.workers)
        transfer = [t for t in TRANSFER_TASKS if t in fast.get("transfer", {})]
        sk_plain = sk_fast = None
        if transfer:
            sk_plain, _ = timed_eval("sklearn-converged, reference engine", model, ",".join(transfer),
                                     classifier="sklearn-converged", reference=True, cache_dir=fast_cache)
            sk_fast, _ = timed_eval("sklearn-converged, fast engine", model, ",".join(transfer),
                                    classifier="sklearn-converged", cache_dir=fast_cache)
        save(None, None, fast, fast_wall, None, sk_plain, sk_fast)
        plain, plain_wall = timed_eval("reference, end to end", model, args.tasks, reference=True,
                                       cache_dir=ref_cache)
        save(plain, plain_wall, fast, fast_wall, same_units(ref_cache, fast_cache), sk_plain, sk_fast)


if __name__ == "__main__":
    main()
