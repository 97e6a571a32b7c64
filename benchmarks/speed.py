"""Speed and memory of mixcse: the training step, big batches, large corpora, evaluation and the ONNX export.

One case per measurement; each writes its JSON under benchmarks/results/ (``--results DIR`` elsewhere,
``--no-write`` nowhere) and prints its figures. Each case's method: docs/performance.md and docs/scale.md.

    python -m benchmarks.speed mixing        # MixCSE vs SimCSE step; loss memory at N = 64..1024 -> mixing_overhead
    python -m benchmarks.speed vs-st         # the same SimCSE run in mixcse and sentence-transformers
    python -m benchmarks.speed profile --ops # where a CPU step's time goes -> profile_step
    python -m benchmarks.speed bf16          # bf16 autocast vs fp32 step; STS-B dev parity -> bf16_parity
    python -m benchmarks.speed compiled      # compiled vs eager CPU step -> compiled_step
    python -m benchmarks.speed big-batch     # cached step vs one pass against the batch size -> big_batch
    python -m benchmarks.speed gpu [--compile]  # BERT-base step on CUDA -> gpu_step / gpu_step_compile
    python -m benchmarks.speed disk-corpus   # corpus: disk at 0.4M-20M sentences -> streaming
    python -m benchmarks.speed eval          # full evaluation, reference vs fast paths -> eval_speed
    python -m benchmarks.speed sts           # STS suite vs SentEval's per-pair loop -> sts_speed
    python -m benchmarks.speed onnx          # ONNX vs torch: speed, sizes, int8 quality -> onnx

Most CPU cases take ``--quick`` (about a minute). Run them alone: anything else on the cores moves the timings.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import logging
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
import zlib
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import yaml

from benchmarks import common
from benchmarks.common import CORPUS, DOWNSTREAM, STAND_IN, interleaved, paired_ratios, read_corpus, summarise
from mixcse.data.loader import BatchPlan, open_corpus
from mixcse.data.memory import TokenizedCorpus
from mixcse.data.reader import iter_lines
from mixcse.evaluation import evaluate
from mixcse.evaluation import senteval as D
from mixcse.evaluation.sts import pearson, row_cosine, spearman
from mixcse.export import export_onnx, quantize_int8
from mixcse.losses import PRESETS, contrastive_loss, materialised_mixcse_loss
from mixcse.model import Encoder, load_backbone
from mixcse.onnx_backend import OnnxSentenceEncoder, open_graph
from mixcse.sentence_encoder import SentenceEncoder
from mixcse.training import trainer
from mixcse.training.config import TrainConfig, build_config
from mixcse.training.distributed import DistContext, init_from_env
from mixcse.training.rundir import MetricsLog
from mixcse.training.step import make_step
from mixcse.utils.tables import STS_TASKS, TRANSFER_TASKS

CASES: dict[str, tuple[Callable, tuple]] = {}
MAX_LEN = 32  # every CPU step case: the stand-in at length 32


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text}")
    return value


def opt(*flags, **kw) -> tuple:
    return flags, kw


QUICK = opt("--quick", action="store_true", help="a short run (about a minute)")
THREADS = opt("--threads", type=positive, default=2, help="torch threads (default 2)")


def case(name: str, *options: tuple):
    """Register ``fn(args)`` as the case ``name`` with its command-line ``options``."""
    def register(fn):
        CASES[name] = (fn, options)
        return fn
    return register


def save(args, name: str, payload: dict) -> None:
    """Print the payload's top-level figures (medians of summaries); write it unless --no-write."""
    figures = {k: v["median"] if isinstance(v, dict) else v for k, v in payload.items()
               if isinstance(v, float) or isinstance(v, dict) and "median" in v}
    print(", ".join(f"{k} {v:.4g}" for k, v in figures.items()), flush=True)
    if not args.no_write:
        common.write_result(name, payload)


def recipe() -> dict:
    return yaml.safe_load((common.REPO / "recipes/cpu/mixcse-mini.yaml").read_text())


def recipe_steps(threads: int, variants: dict[str, dict], **overrides) -> dict[str, Callable]:
    """The trainer's CPU step on the stand-in as `mixcse.train` builds it (TrainConfig defaults: fused AdamW, numpy
    dropout masks, 4 length buckets; cls + MLP head; ``overrides`` replace config keys) on one batch of batch_size
    corpus sentences (one view: the step makes the two): one step per ``make_step`` kwargs of ``variants``."""
    cfg, ctx = TrainConfig(model=str(STAND_IN), pooler="cls", **overrides), DistContext()
    encoder, tokenizer, optimizer = common.model_setup(cfg, ctx, threads, seed=0)
    batch = TokenizedCorpus(read_corpus(cfg.batch_size), tokenizer, MAX_LEN).batch(np.arange(cfg.batch_size))
    steps = {name: make_step(cfg, ctx, encoder, optimizer, **kw) for name, kw in variants.items()}
    return {name: (lambda step=step: step(batch)) for name, step in steps.items()}


def quiet() -> None:
    """Silence the progress bars and warnings of sentence-transformers, transformers and datasets."""
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    warnings.filterwarnings("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    for name in ("sentence_transformers", "datasets", "accelerate"):
        logging.getLogger(name).setLevel(logging.ERROR)


def st_model():
    """sentence-transformers on the stand-in: Transformer (length 32) + CLS pooling, on CPU."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    torch.manual_seed(0)
    backbone = Transformer(str(STAND_IN), max_seq_length=MAX_LEN)
    return SentenceTransformer(modules=[backbone, Pooling(backbone.get_embedding_dimension(), "cls")], device="cpu")


# ---------------------------------------------------------------------------------------------------- the CPU step


@case("mixing", QUICK, THREADS, opt("--rounds", type=positive, help="step rounds (default 20, quick 2)"))
def mixing(args) -> None:
    """MixCSE vs SimCSE: step time (target <= 1.05x) and loss memory (target >= 100x less at N = 1024)."""
    t0 = time.perf_counter()
    rounds = args.rounds or (2 if args.quick else 20)
    meter_mb = common.check_peak_meter()
    torch.set_num_threads(1)  # the loss's small N x N kernels: thread wake-ups dominate on a shared machine
    loss = {str(n): loss_size(n, 768, 2 if args.quick else 5, timed=not args.quick or n <= 256)
            for n in ([64, 256, 1024] if args.quick else [64, 128, 256, 512, 1024])}
    steps = recipe_steps(args.threads, {n: {"objective": PRESETS[n]} for n in ("simcse", "mixcse")},
                         max_grad_norm=None)
    times = interleaved(steps, repeats=rounds, warmup=1)
    ratios = paired_ratios(times["mixcse"], times["simcse"])
    step = {"batch_shape": [128, MAX_LEN], "threads": args.threads, "rounds": rounds,
            "simcse_step_s": summarise(times["simcse"]), "mixcse_step_s": summarise(times["mixcse"]),
            "ratio": summarise(ratios), "raw": {**times, "ratio": ratios}}
    save(args, "mixing_overhead", {
        "mode": "quick" if args.quick else "default", "step_time_ratio": step["ratio"]["median"],
        "memory_ratio_n1024": loss["1024"]["memory_ratio"],
        "targets": {"step_time_ratio_max": 1.05, "memory_ratio_n1024_min": 100},
        "memory_method": "torch.profiler(profile_memory=True) allocator events, running-sum peak",
        "peak_meter_selftest_mb": meter_mb, "loss_threads": 1, "step": step, "loss": loss,
        "wall_s": time.perf_counter() - t0})


def loss_size(n: int, dim: int, repeats: int, timed: bool) -> dict:
    """Peak memory, float64 agreement and (``timed``) time of the closed-form and materialised losses at ``n``."""
    objective, g = PRESETS["mixcse"], torch.Generator().manual_seed(n)
    # embedding-like views: a shared direction (in-batch cosines ~0.7), content, view noise (positives ~0.96)
    base1 = 1.5 * torch.randn(1, dim, generator=g) + torch.randn(n, dim, generator=g)
    base2 = base1 + 0.5 * torch.randn(n, dim, generator=g)
    z1, z2 = base1.clone().requires_grad_(), base2.clone().requires_grad_()  # inputs exist before the loss

    def run(loss_fn, a=z1, b=z2):
        a.grad = b.grad = None
        loss = loss_fn(a, b)
        loss.backward()
        return loss.detach(), a.grad, b.grad

    closed = lambda a, b: contrastive_loss(a, b, objective).loss  # noqa: E731
    materialised = lambda a, b: materialised_mixcse_loss(a, b, objective.lam, objective.temperature)  # noqa: E731
    peak_closed, res_c = common.peak_cpu_bytes(lambda: run(closed))
    peak_mat, res_m = common.peak_cpu_bytes(lambda: run(materialised))
    w1, w2 = base1.double().requires_grad_(), base2.double().requires_grad_()
    truth = run(closed, w1, w2)

    def rel_errors(res):
        grad = max(((a.double() - b).abs().max() / b.abs().max()).item() for a, b in zip(res[1:], truth[1:]))
        return abs(res[0].item() - truth[0].item()) / abs(truth[0].item()), grad

    errors = {"closed_form_fp32": rel_errors(res_c), "materialised_fp32": rel_errors(res_m)}
    if n <= 256:  # a mathematical identity: equal in float64
        errors["materialised_fp64_vs_closed_fp64"] = rel_errors(run(materialised, w1, w2))
    for name, (le, ge) in errors.items():
        if max(le, ge) > (1e-10 if "fp64" in name else 1e-4):
            raise SystemExit(f"N={n}: {name} is off the float64 closed form (loss rel err {le:.1e}, grad {ge:.1e})")
    r = {"closed_form_peak_mb": peak_closed / 1e6, "materialised_peak_mb": peak_mat / 1e6,
         "memory_ratio": peak_mat / peak_closed,
         "rel_errors_vs_fp64_closed_form": {k: {"loss": v[0], "grad_max": v[1]} for k, v in errors.items()}}
    if timed:
        times = interleaved({"closed_form": lambda: run(closed), "materialised": lambda: run(materialised)},
                            repeats=repeats, warmup=1)
        r.update(closed_form_s=summarise(times["closed_form"]), materialised_s=summarise(times["materialised"]),
                 time_ratio_materialised_over_closed=summarise(paired_ratios(times["materialised"],
                                                                             times["closed_form"])), raw=times)
    print(f"  loss N={n:5d}: peak {r['closed_form_peak_mb']:7.1f} MB closed form vs {r['materialised_peak_mb']:7.1f} "
          f"MB materialised (x{r['memory_ratio']:.0f})", flush=True)
    return r


@case("compiled", opt("--rounds", type=positive, default=10), THREADS)
def compiled(args) -> None:
    """The compiled CPU step (compile: true: inductor, batches padded to 32) against the eager one."""
    steps, compile_s = {}, None
    for name, flag in (("eager", False), ("compiled", True)):
        steps[name] = recipe_steps(args.threads, {"step": {}}, compile=flag)["step"]
        t0 = time.perf_counter()
        steps[name]()  # the first call compiles
        compile_s = time.perf_counter() - t0 if flag else compile_s
    times = interleaved(steps, repeats=args.rounds, warmup=1)
    save(args, "compiled_step", {
        "setting": {"model": "stand-in (mini-wiki-mlm)", "batch": 64, "max_seq_length": MAX_LEN,
                    "threads": args.threads, "rounds": args.rounds},
        "compile_seconds": compile_s,
        "compiled_over_eager": summarise(paired_ratios(times["compiled"], times["eager"])),
        "eager_step_s": summarise(times["eager"]), "compiled_step_s": summarise(times["compiled"]), "raw": times})


@case("bf16", opt("--quick", action="store_true", help="speed only, 2 rounds"), THREADS)
def bf16(args) -> None:
    """bf16 autocast vs fp32 on CPU: step speed and STS-B dev parity."""
    t0 = time.perf_counter()
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    rounds = 2 if args.quick else 10
    steps = recipe_steps(args.threads, {p: {"objective": PRESETS["mixcse"], "precision": p} for p in ("fp32", "bf16")})
    times = interleaved(steps, repeats=rounds, warmup=1)
    ratio = paired_ratios(times["fp32"], times["bf16"])
    speed = {"rounds": rounds, "threads": args.threads, "fp32_step_s": summarise(times["fp32"]),
             "bf16_step_s": summarise(times["bf16"]), "speedup_bf16": summarise(ratio),
             "raw": {**times, "speedup": ratio}}
    payload = {"mode": "quick" if args.quick else "default",
               "isa": {f: f" {f}" in flags for f in ("avx512_bf16", "amx_bf16", "amx_tile", "avx512f")},
               "cpu_supports_bf16": trainer.cpu_supports_bf16(),
               "auto_resolves_to": trainer.resolve_precision("auto", torch.device("cpu")),
               "speed": speed, "speedup_bf16": speed["speedup_bf16"]["median"]}
    if not args.quick:
        payload["quality"] = bf16_quality(125, [42, 43], args.threads)
        payload["within_seed_noise"] = payload["quality"]["within_seed_noise"]
    save(args, "bf16_parity", {**payload, "wall_s": time.perf_counter() - t0})


def bf16_quality(steps: int, seeds: list[int], threads: int) -> dict:
    runs = []
    with tempfile.TemporaryDirectory(prefix="mixcse-bf16-") as workdir:
        for seed in seeds:
            for precision in ("fp32", "bf16"):
                cfg = {**recipe(), "model": str(STAND_IN), "train_file": str(CORPUS), "data_dir": str(DOWNSTREAM),
                       "output_dir": f"{workdir}/{precision}-{seed}", "max_steps": steps, "eval_steps": steps,
                       "seed": seed, "precision": precision, "num_threads": threads}
                t0 = time.perf_counter()
                with contextlib.redirect_stdout(io.StringIO()):
                    result = trainer.train(cfg, overwrite=True, progress=False)
                # the trained model's score (best_dev may be the start model's, always a candidate)
                final = [r for r in MetricsLog(Path(result.output_dir) / "metrics.jsonl").records() if "stsb_dev" in r]
                runs.append({"seed": seed, "precision": precision, "stsb_dev": final[-1]["stsb_dev"],
                             "raw_dev": result.raw_dev, "train_seconds": result.train_seconds,
                             "sentences_per_second": result.sentences_per_second,
                             "wall_s": time.perf_counter() - t0})
                print(f"  seed {seed} {precision}: STS-B dev {runs[-1]['stsb_dev']:.2f}", flush=True)
    by = {p: [r["stsb_dev"] for r in runs if r["precision"] == p] for p in ("fp32", "bf16")}
    mean = {p: float(np.mean(v)) for p, v in by.items()}
    spread, gap = max(max(v) - min(v) for v in by.values()), mean["bf16"] - mean["fp32"]
    return {"steps": steps, "seeds": seeds, "runs": runs, "mean_dev": mean, "bf16_minus_fp32": gap,
            "paired_gaps_same_seed": [b - f for f, b in zip(by["fp32"], by["bf16"])],
            "seed_spread_within_precision": spread, "within_seed_noise": abs(gap) <= spread,
            "raw_model_dev": next((r["raw_dev"] for r in runs if r["raw_dev"] is not None), None)}


@case("profile", opt("--quick", action="store_true", help="6 steps"), THREADS,
      opt("--ops", action="store_true", help="also torch.profiler's top operators of one step"))
def profile(args) -> None:
    """Where the time of a CPU training step goes, phase by phase; torch's default AdamW vs the fused one."""
    steps, warmup = 6 if args.quick else 30, 2
    cfg, corpus, plan, encoder, optimizer, train_step, tokenise_s = profile_setup(args.threads, steps + warmup)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, trainer.linear_schedule(steps + warmup, 0))
    per_step, log_times = profile_loop(cfg, corpus, plan, scheduler, train_step, steps, warmup)
    amortised = {"tokenisation (amortised)": [tokenise_s / (steps + warmup)],
                 "logging (amortised)": [sum(log_times) / len(per_step)]}
    phases = {p: summarise(amortised.get(p) or [s[p] for s in per_step]) for p in PHASES}
    backward = {k: summarise([s["backward"] for s in per_step if s["_logging_step"] == (k == "logging")]
                             or [float("nan")]) for k in ("logging", "other")}
    result = {"steps": len(per_step), "warmup_steps": warmup, "threads": args.threads, "log_steps": cfg.log_steps,
              "phases_ms": {k: v["median"] * 1e3 for k, v in phases.items()}, "phases": phases,
              "step_total_s": summarise([sum(v for k, v in s.items() if not k.startswith("_")) for s in per_step]),
              "backward_logging_vs_other_steps_s": backward}
    if args.ops:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            train_step(corpus.batch(plan.indices(0)[:cfg.batch_size]))
        result["top_ops"] = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20)
        print(result["top_ops"])
    result["adamw"] = adamw_comparison(encoder, cfg, rounds=3 if len(per_step) < 10 else 10)
    print("\n".join(f"  {phase:32s} {ms:9.1f} ms" for phase, ms in result["phases_ms"].items()))
    save(args, "profile_step", {"mode": "quick" if args.quick else "default", **common.json_safe(result)})


PHASES = ["tokenisation (amortised)", "collation (pad + 2 views)", "forward", "loss", "backward", "grad clip",
          "optimizer step (AdamW)", "scheduler + zero_grad", "logging (amortised)", "progress/bookkeeping"]


def profile_setup(threads: int, steps: int):
    cfg = build_config({**recipe(), "model": str(STAND_IN), "train_file": str(CORPUS), "num_threads": threads,
                        "precision": "fp32"})
    ctx = init_from_env()
    sentences = read_corpus(steps * cfg.batch_size)  # the first lines of the corpus: what a run would tokenise
    plan = BatchPlan(len(sentences), cfg.batch_size, cfg.seed)
    encoder, tokenizer, optimizer = common.model_setup(cfg, ctx, cfg.num_threads, cfg.seed)
    t0 = time.perf_counter()
    corpus = TokenizedCorpus(sentences, tokenizer, cfg.max_seq_length, plan.used_indices(steps))
    tokenise_s = time.perf_counter() - t0
    return cfg, corpus, plan, encoder, optimizer, make_step(cfg, ctx, encoder, optimizer), tokenise_s


def profile_loop(cfg, corpus, plan, scheduler, train_step, steps: int, warmup: int):
    """The trainer's loop, a wall-clock stamp after each phase; returns (per measured step phase seconds, logging
    seconds of the measured logging steps)."""
    total, per_step, log_times = steps + warmup, [], []
    window_sentences, window_start = 0, time.perf_counter()
    for step in range(total):
        stamps = [time.perf_counter()]
        batch = corpus.batch(plan.indices(step)[:cfg.batch_size])
        logging_step = (step + 1) % cfg.log_steps == 0 or step + 1 == total
        stamps.append(time.perf_counter())
        # the step stamps forward, loss, backward, clip, optimizer, zero_grad itself
        result = train_step(batch, mark=lambda phase: stamps.append(time.perf_counter()))
        scheduler.step()
        stamps.append(time.perf_counter())
        window_sentences, t_log = window_sentences + cfg.batch_size, 0.0
        if logging_step:  # what the trainer does on a logging step (json line built, not written)
            t = time.perf_counter()
            out = result.loss
            record = {"step": step + 1, "loss": out.loss.item(), "simcse_loss": out.simcse_loss.item(),
                      "lr": scheduler.get_last_lr()[0], "anchor_grad_norm": result.anchor_grad_norm().item(),
                      "sentences_per_second": window_sentences / max(t - window_start, 1e-9),
                      **{k: v.item() for k, v in out.stats.items()}}
            assert math.isfinite(record["loss"])
            json.dumps(record)
            window_start, window_sentences = t, 0
            t_log = time.perf_counter() - t
            log_times += [t_log] if step >= warmup else []
        stamps.append(time.perf_counter())
        if step >= warmup:
            d = np.diff(stamps)
            per_step.append({"collation (pad + 2 views)": d[0], "forward": d[1], "loss": d[2], "backward": d[3],
                             "grad clip": d[4], "optimizer step (AdamW)": d[5], "scheduler + zero_grad": d[6] + d[7],
                             "progress/bookkeeping": d[8] - t_log, "_logging_step": logging_step})
    return per_step, log_times


def adamw_comparison(encoder, cfg, rounds: int) -> dict:
    """torch's default AdamW (for-each) vs fused=True (the trainer's): same parameters, gradients, groups."""
    params = [p for p in encoder.parameters() if p.requires_grad]
    torch.manual_seed(0)
    grads = [torch.randn_like(p) * 1e-3 for p in params]
    copies = {}
    for name, kw in (("default", {}), ("fused", {"fused": True})):
        clone = {p: torch.nn.Parameter(p.detach().clone()) for p in params}
        for c, g in zip(clone.values(), grads):
            c.grad = g.clone()
        groups = [{**g, "params": [clone[p] for p in g["params"]]}
                  for g in trainer.optimizer_groups(encoder, cfg.weight_decay)]
        copies[name] = (torch.optim.AdamW(groups, lr=cfg.learning_rate, **kw), list(clone.values()))
        copies[name][0].step()  # same start, one identical step: compared bitwise
    max_diff = max((a - b).abs().max().item() for a, b in zip(copies["default"][1], copies["fused"][1]))
    times = interleaved({name: copies[name][0].step for name in copies}, repeats=rounds, warmup=1)
    return {"default_s": summarise(times["default"]), "fused_s": summarise(times["fused"]),
            "speedup_fused": summarise(paired_ratios(times["default"], times["fused"])),
            "bit_identical": max_diff == 0.0, "max_abs_param_diff_after_one_step": max_diff,
            "n_params": sum(p.numel() for p in params)}


# ------------------------------------------------------------------------------------------ big batches and peers


@case("big-batch", opt("--mini-batch", type=positive, default=64), THREADS,
      opt("--rounds", type=positive, default=3, help="interleaved timing rounds of the side-by-side steps"),
      opt("--quick", action="store_true", help="N <= 256, one round"),
      opt("--timing-only", action="store_true", help="only the side-by-side timing -> big_batch_timing.json"))
def big_batch(args) -> None:
    """The cached step (mini_batch_size K) against the one-pass step: memory and time against the batch size."""
    k, threads = args.mini_batch, args.threads
    max_onepass, max_cached, n, rounds = (128, 256, 128, 1) if args.quick else (1024, 4096, 512, args.rounds)
    meter_mb = common.check_peak_meter()
    sizes = [size for size in (64, 128, 256, 512, 1024, 2048, 4096) if size <= max_cached]
    sweep: dict[str, list[dict]] = {"onepass_mixcse": [], "cached_mixcse": []}
    for size in [] if args.timing_only else sizes:
        if size <= max_onepass:
            sweep["onepass_mixcse"].append(measure_step(train_step(size, None, "mixcse", threads), size))
        if size >= k:
            sweep["cached_mixcse"].append(measure_step(train_step(size, k, "mixcse", threads), size))
    sides = {"onepass_mixcse": train_step(n, None, "mixcse", threads),
             "cached_mixcse": train_step(n, k, "mixcse", threads),
             "cached_simcse": train_step(n, k, "simcse", threads), "st_cached_simcse": st_cached_step(n, k, threads)}
    times = interleaved(sides, repeats=rounds, warmup=1)
    peaks = {name: common.peak_cpu_bytes(step)[0] / 1e6 for name, step in sides.items()}
    summary = {"time_per_sentence_ratio_cached_vs_onepass":
               summarise(paired_ratios(times["cached_mixcse"], times["onepass_mixcse"]))["median"],
               "time_ratio_measured_at_batch": n, "st_time_ratio_vs_mixcse_cached_simcse":
               summarise(paired_ratios(times["st_cached_simcse"], times["cached_simcse"]))["median"]}
    side_by_side = {name: {"peak_mb": peaks[name], "step_s": summarise(times[name]),
                           "sentences_per_s": n / summarise(times[name])["median"]} for name in sides}
    setting = {"mini_batch_size": k, "threads": threads, "rounds": rounds}
    if args.timing_only:
        return save(args, "big_batch_timing", {"setting": setting, **summary, "side_by_side": side_by_side,
                                               "raw_times": times})
    peak = {kind: {r["batch"]: r["peak_mb"] for r in rows} for kind, rows in sweep.items()}
    save(args, "big_batch_quick" if args.quick else "big_batch", {
        "setting": {"model": "stand-in (mini-wiki-mlm)", "pooler": "cls + MLP head", "max_seq_length": MAX_LEN,
                    **setting, "peak_meter_selftest_mb": meter_mb},
        f"peak_memory_ratio_{sizes[-1]}_cached_vs_64": peak["cached_mixcse"][sizes[-1]] / peak["onepass_mixcse"][64],
        **summary, "side_by_side": side_by_side, "sweep": sweep, "raw_times": times})


def train_step(n: int, mini_batch: int | None, loss: str, threads: int) -> Callable:
    """The trainer's step on a batch of ``n`` (``mini_batch`` None = one pass)."""
    return recipe_steps(threads, {"step": {}}, loss=loss, batch_size=n, mini_batch_size=mini_batch)["step"]


def st_cached_step(n: int, mini_batch: int, threads: int) -> Callable:
    """sentence-transformers' cached SimCSE step: loss forward + backward + clipping + AdamW step, dropout on."""
    from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss

    quiet()
    torch.set_num_threads(threads)
    model = st_model().train()
    loss = CachedMultipleNegativesRankingLoss(model, scale=20.0, mini_batch_size=mini_batch)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5, fused=True)
    features = model.tokenize(read_corpus(n))

    def step():
        value = loss([dict(features), dict(features)], None)
        value.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return value

    return step


def measure_step(step: Callable, n: int) -> dict:
    """The time of one step, then the peak memory of the next (after an untimed step allocated AdamW's state)."""
    step()
    t0 = time.perf_counter()  # timed before the profiled step: a step after torch.profiler ran slower
    step()
    seconds = time.perf_counter() - t0
    peak, _ = common.peak_cpu_bytes(step)
    print(f"  N={n:5d}  peak {peak / 1e6:8.1f} MB  {1e3 * seconds / n:6.2f} ms/sentence", flush=True)
    return {"batch": n, "peak_mb": peak / 1e6, "step_s": seconds, "ms_per_sentence": 1e3 * seconds / n}


@case("vs-st", opt("--quick", action="store_true", help="1 round x 2 steps, no warm-up run, no ablation"), THREADS)
def vs_st(args) -> None:
    """mixcse vs sentence-transformers on the same SimCSE run: sentences/s (target >= 1.2x)."""
    quiet()
    t0 = time.perf_counter()
    import datasets
    import sentence_transformers
    import transformers

    rounds, steps = (1, 2) if args.quick else (8, 10)
    sides = ["mixcse", "sentence_transformers"] + ([] if args.quick else ["mixcse_one_pass"])
    runs = {side: [] for side in sides}
    with tempfile.TemporaryDirectory(prefix="mixcse-vs-st-") as workdir:
        for r in range(0 if args.quick else -1, rounds):  # round -1: the untimed one-step warm-up
            for side, res in vs_st_round(sides if r % 2 else sides[::-1], r + 1, steps if r >= 0 else 1,
                                         args.threads, Path(workdir)):
                runs[side] += [res] if r >= 0 else []
    st = runs["sentence_transformers"]
    save(args, "vs_sentence_transformers", {
        "mode": "quick" if args.quick else "default", "rounds": rounds, "steps_per_run": steps, "batch_size": 64,
        "max_seq_length": MAX_LEN, "threads": args.threads, "precision": "fp32",
        "timing": "model load excluded from both; data prep, tokenisation, trainer set-up, steps and mixcse's "
                  "final checkpoint/model writes included",
        "versions": {"sentence_transformers": sentence_transformers.__version__,
                     "transformers": transformers.__version__, "datasets": datasets.__version__},
        "peer_info": st[0]["info"] if st else None, **vs_st_summary(runs), "target": 1.2, "raw": runs,
        "wall_s": time.perf_counter() - t0})


def vs_st_round(order: list[str], r: int, steps: int, threads: int, workdir: Path):
    """Each side's run on the same ``steps x 64`` corpus lines (round ``r``'s); yields (side, measures)."""
    sentences = read_corpus(steps * 64, skip=r * steps * 64)
    train_file = workdir / f"train-{r}.txt"
    train_file.write_text("\n".join(sentences) + "\n")
    for side in order:
        cpu0 = time.process_time()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            if side == "sentence_transformers":
                res = run_peer(sentences, steps, threads, workdir, seed=r)
            else:
                res = run_mixcse(train_file, steps, threads, workdir, seed=r,
                                 length_buckets=1 if side == "mixcse_one_pass" else None)
        res.update(process_cpu_s=time.process_time() - cpu0, sentences_per_s=steps * 64 / res["run_s"],
                   loop_sentences_per_s=steps * 64 / res["loop_s"])  # CPU time: all threads, model load included
        print(f"  round {r} {side:22s} {res['sentences_per_s']:6.1f} sentences/s", flush=True)
        for sub in ("mixcse", "peer"):
            shutil.rmtree(workdir / sub, ignore_errors=True)
        yield side, res


def run_peer(sentences: list[str], steps: int, threads: int, workdir: Path, seed: int) -> dict:
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        begin = last = None

        def on_train_begin(self, *args, **kwargs):
            self.begin = time.perf_counter()

        def on_step_end(self, *args, **kwargs):
            self.last = time.perf_counter()

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    model = st_model()
    t1 = time.perf_counter()
    args = SentenceTransformerTrainingArguments(
        output_dir=str(workdir / "peer"), per_device_train_batch_size=64, max_steps=steps, learning_rate=3e-5,
        weight_decay=0.0, lr_scheduler_type="linear", max_grad_norm=1.0, logging_steps=10, save_strategy="no",
        eval_strategy="no", report_to="none", use_cpu=True, bf16=False, fp16=False, disable_tqdm=True,
        dataloader_drop_last=True, seed=seed)
    clock = Clock()
    peer = SentenceTransformerTrainer(model=model, args=args, callbacks=[clock],
                                      train_dataset=Dataset.from_dict({"anchor": sentences, "positive": sentences}),
                                      loss=MultipleNegativesRankingLoss(model, scale=20.0))
    peer.train()
    t2 = time.perf_counter()
    assert peer.state.global_step == steps, peer.state.global_step
    optimizer = getattr(peer.optimizer, "optimizer", peer.optimizer)
    info = {"optimizer": type(optimizer).__name__, "optim": str(args.optim),
            "attn_implementation": model[0].model.config._attn_implementation, "threads_after": torch.get_num_threads()}
    return {"load_s": t1 - t0, "run_s": t2 - t1, "loop_s": clock.last - clock.begin, "setup_s": clock.begin - t1,
            "info": info}


def run_mixcse(train_file: Path, steps: int, threads: int, workdir: Path, seed: int,
               length_buckets: int | None = None) -> dict:
    load_time, original = [], trainer.load_encoder

    def timed_load(*args, **kwargs):
        t = time.perf_counter()
        result = original(*args, **kwargs)
        load_time.append(time.perf_counter() - t)
        return result

    config = {"model": str(STAND_IN), "train_file": str(train_file), "output_dir": str(workdir / "mixcse"),
              "loss": "simcse", "temperature": 0.05, "pooler": "cls_before_pooler", "batch_size": 64,
              "max_seq_length": MAX_LEN, "learning_rate": 3e-5, "weight_decay": 0.0, "warmup_ratio": 0.0,
              "max_grad_norm": 1.0, "max_steps": steps, "precision": "fp32", "num_threads": threads,
              "select_on": "none", "log_steps": 10, "seed": seed}
    if length_buckets is not None:
        config["length_buckets"] = length_buckets
    trainer.load_encoder = timed_load
    try:
        t0 = time.perf_counter()
        result = trainer.train(config, overwrite=True, progress=False)
        total = time.perf_counter() - t0
    finally:
        trainer.load_encoder = original
    assert result.steps == steps, result.steps
    return {"load_s": load_time[0], "run_s": total - load_time[0], "loop_s": result.train_seconds,
            "outside_loop_s": total - load_time[0] - result.train_seconds}


def vs_st_summary(runs: dict) -> dict:
    def col(side, key="sentences_per_s"):
        return [r[key] for r in runs[side]]

    def ratio(a, b, key="sentences_per_s"):
        per_round = paired_ratios(col(a, key), col(b, key))
        return summarise(per_round)["median"], per_round

    mx, st, one = "mixcse", "sentence_transformers", "mixcse_one_pass"
    (throughput, per_round), (loop, loop_rounds) = ratio(mx, st), ratio(mx, st, "loop_sentences_per_s")
    cpu, cpu_rounds = ratio(st, mx, "process_cpu_s")
    out = {"mixcse_sentences_per_s": summarise(col(mx)), "sentence_transformers_sentences_per_s": summarise(col(st)),
           "throughput_ratio": throughput, "throughput_ratio_per_round": per_round,
           "loop_only": {"mixcse_sentences_per_s": summarise(col(mx, "loop_sentences_per_s")),
                         "sentence_transformers_sentences_per_s": summarise(col(st, "loop_sentences_per_s")),
                         "ratio": loop, "ratio_per_round": loop_rounds},
           "cpu_time": {"note": "process CPU seconds of each whole run (model load included), peer / mixcse: less "
                                "sensitive than wall time to other processes' load, more to spin-waiting threads",
                        "ratio": cpu, "ratio_per_round": cpu_rounds}}
    if one in runs:
        ab, ab_rounds = ratio(one, st)
        out["ablation_one_pass"] = {
            "note": "mixcse with length_buckets=1: each batch forwarded as one pass padded to its longest sentence",
            "sentences_per_s": summarise(col(one)), "throughput_ratio": ab, "throughput_ratio_per_round": ab_rounds,
            "default_over_one_pass": ratio(mx, one)[0]}
    return out


# --------------------------------------------------------------------------------------------------------- GPU


@case("gpu", opt("--smoke", action="store_true", help="tiny configuration (automatic without CUDA)"),
      opt("--batches", type=positive, nargs="+", help="batch sizes (default 64 512; smoke 16 64)"),
      opt("--compile", action="store_true", help="also the compiled steps (compile: true), interleaved with eager"))
def gpu(args) -> None:
    """SimCSE and MixCSE steps of a BERT-base-size encoder on CUDA: steps/s, TFLOP/s, projected epoch."""
    import transformers

    transformers.logging.set_verbosity_error()
    cuda = torch.cuda.is_available()
    smoke, device = args.smoke or not cuda, torch.device("cuda" if cuda else "cpu")
    if smoke:  # figures that test the case, not GPU figures
        config = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=128, vocab_size=2000)
        batches, seq, timing = args.batches or [16, 64], 16, {"blocks": 2, "per_block": 2, "warmup": 1}
    else:
        config = transformers.BertConfig()
        batches, seq, timing = args.batches or [64, 512], 32, {"blocks": 4, "per_block": 10, "warmup": 5}
    t0 = time.perf_counter()
    torch.manual_seed(0)
    encoder = Encoder(transformers.BertModel(config, add_pooling_layer=False), "cls").to(device).train()
    results = [gpu_measure(encoder, config, batch, seq, device, args.compile, **timing) for batch in batches]
    ref = next((r for r in results if r["batch"] == 64), {})
    projection = {f"{k}_epoch_s": 15_625 * v["step_s"] for k, v in ref.items() if isinstance(v, dict)}
    save(args, ("gpu_step_smoke" if smoke else "gpu_step") + ("_compile" if args.compile else ""), {
        "mode": "smoke" if smoke else "full", "compiled_side": args.compile,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu", "precision": "bf16 autocast",
        "params_total": sum(p.numel() for p in encoder.parameters()), "params_matmul": matmul_params(encoder),
        "flops_formula": "6*P*T + 12*L*S*d*T, T = 2*batch*S tokens per step",
        "config": {"layers": config.num_hidden_layers, "hidden": config.hidden_size,
                   "heads": config.num_attention_heads, "seq_len": seq},
        "results": results, "projection": projection, "wall_s": time.perf_counter() - t0})


def matmul_params(encoder) -> int:
    """P: every parameter outside the embedding module (layers + MLP head; biases and norms included, <0.1%)."""
    return sum(p.numel() for name, p in encoder.named_parameters() if ".embeddings." not in name)


def gpu_measure(encoder, config, batch: int, seq: int, device, compiled: bool, blocks: int, per_block: int,
                warmup: int) -> dict:
    """SimCSE and MixCSE (and compiled) steps alternating in blocks of ``per_block`` steps: the median block."""
    g = torch.Generator().manual_seed(batch * 1000 + seq)
    ids = torch.randint(1000, config.vocab_size, (batch, seq), generator=g)
    ids[:, 0], ids[:, -1] = 101, 102  # [CLS] ... [SEP]; one view: the step makes the two
    data = {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device)}
    optimizer, ctx = trainer.build_optimizer(encoder, TrainConfig(), device), DistContext(device=device)
    steps = {name: make_step(TrainConfig(), ctx, encoder, optimizer, PRESETS[name], precision="bf16",
                             length_buckets=1) for name in ("simcse", "mixcse")}
    if compiled:  # batches padded to max_seq_length (here every batch is that long)
        steps.update({f"{name}_compiled": make_step(TrainConfig(compile=True, max_seq_length=seq), ctx, encoder,
                                                    optimizer, PRESETS[name], precision="bf16")
                      for name in ("simcse", "mixcse")})
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def block(name, n=per_block):
        for _ in range(n):
            steps[name](data)
        sync()

    for name in steps:
        block(name, warmup)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = interleaved({name: (lambda name=name: block(name)) for name in steps}, repeats=blocks, warmup=0,
                        timer=lambda: (sync(), time.perf_counter())[1])
    tokens = 2 * batch * seq
    flops = 6 * matmul_params(encoder) * tokens + 12 * config.num_hidden_layers * seq * config.hidden_size * tokens
    out = {"batch": batch, "seq_len": seq, "tokens_per_step": tokens, "flops_per_step": flops}
    for name, block_s in times.items():
        t = statistics.median(block_s) / per_block
        out[name] = {"step_s": t, "steps_per_s": 1.0 / t, "sentences_per_s": batch / t, "tflops": flops / t / 1e12,
                     "block_step_s": [b / per_block for b in block_s]}
    print(f"batch {batch:4d}: " + ", ".join(f"{k} {out[k]['steps_per_s']:.2f} steps/s" for k in steps), flush=True)
    out["mixcse_over_simcse_time"] = out["mixcse"]["step_s"] / out["simcse"]["step_s"]
    for name in ("simcse", "mixcse") if compiled else ():
        out[f"{name}_compiled_speedup"] = out[name]["step_s"] / out[f"{name}_compiled"]["step_s"]
    if device.type == "cuda":
        out["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return out


# ------------------------------------------------------------------------------------------------------ evaluation


@case("eval", opt("--tasks", default="all"),
      opt("--workers", type=positive, default=2, help="transfer probe processes on the fast side (default 2)"),
      opt("--precisions", action="store_true", help="fp32 vs bf16 on the fast path -> eval_precision.json"),
      opt("--rounds", type=positive, default=1, help="with --precisions: alternating rounds of each"))
def eval_speed(args) -> None:
    """A full evaluation of all-MiniLM-L6-v2 on the reference paths and on the fast ones, side by side."""
    model = common.minilm_path()
    if args.precisions:
        return save(args, "eval_precision", compare_precisions(model, args.tasks, args.workers, args.rounds))
    with tempfile.TemporaryDirectory() as tmp:
        ref_cache, fast_cache = Path(tmp) / "reference", Path(tmp) / "fast"
        # the fast side first: the sklearn-converged comparison reads its cached embeddings
        fast = timed_eval(model, args.tasks, cache_dir=fast_cache, workers=args.workers)
        transfer = ",".join(t for t in TRANSFER_TASKS if t in fast[0].get("transfer", {}))
        sk = [timed_eval(model, transfer, classifier="sklearn-converged", reference=reference, cache_dir=fast_cache)[0]
              for reference in (True, False)] if transfer else None
        save(args, "eval_speed", eval_report(args.workers, None, fast, None, sk))
        plain = timed_eval(model, args.tasks, reference=True, cache_dir=ref_cache)
        save(args, "eval_speed", eval_report(args.workers, plain, fast, same_units(ref_cache, fast_cache), sk))


def timed_eval(model, tasks: str, **kw) -> tuple[dict, float]:
    t0 = time.perf_counter()
    res = evaluate(model, tasks=tasks, data_dir=DOWNSTREAM, verbose=False, **kw)
    wall = time.perf_counter() - t0
    print(f"{tasks} ({', '.join(f'{k}={v}' for k, v in kw.items() if k != 'cache_dir')}): {wall:.1f} s", flush=True)
    return res, wall


def scores(res: dict, part: str) -> dict:
    key = "spearman" if part == "sts" else "acc"
    return {t: v[key] for t, v in res.get(part, {}).items() if t != "avg"}


def max_diff(a: dict, b: dict) -> float:
    return max((abs(a[k] - b[k]) for k in a if k in b), default=0.0)


def eval_side(res: dict, wall: float | None = None) -> dict:
    """One evaluation's phases, scores and transfer seconds (its per-task times overlap with workers: not a sum)."""
    sec = res["settings"]["seconds"]
    side = {"seconds": {t: sec[t] for t in TRANSFER_TASKS if t in sec}, "acc": scores(res, "transfer"),
            "chosen_reg": {t: v.get("chosen_reg") for t, v in res.get("transfer", {}).items() if t != "avg"}}
    if wall is None:
        return side
    phases = {"load_data": sec.get("load_data", 0.0), "encode": sec.get("encode", 0.0),
              "sts_and_analysis": sum(sec.get(t, 0.0) for t in STS_TASKS + ("analysis",)), "total": sec["total"]}
    phases["transfer"] = phases["total"] - phases["load_data"] - phases["encode"] - phases["sts_and_analysis"]
    return {"wall_seconds": round(wall, 2), "phases_seconds": phases, "encoding": res["settings"]["encoding"],
            "sts": scores(res, "sts"), **side, "cpu_seconds": res["settings"]["cpu_seconds"]}


def same_units(a: Path, b: Path) -> bool:
    files = sorted(p.relative_to(a) for p in a.rglob("unit-*.npy"))
    return bool(files) and files == sorted(p.relative_to(b) for p in b.rglob("unit-*.npy")) and \
        all(np.array_equal(np.load(a / f), np.load(b / f)) for f in files)


def eval_report(workers: int, plain, fast, identical_embeddings, sk) -> dict:
    out: dict = {"model": "all-MiniLM-L6-v2", "tasks": fast[0]["settings"]["tasks"], "mode": "test",
                 "protocol": "senteval-pytorch (the default)", "workers": {"reference": 1, "fast": workers},
                 "complete": plain is not None and sk is not None}
    if sk is not None:
        a, b = eval_side(sk[0]), eval_side(sk[1])
        total_a, total_b = sum(a["seconds"].values()), sum(b["seconds"].values())
        out["sklearn_converged"] = {
            "speedup_probes": round(total_a / total_b, 3),
            "max_abs_diff_transfer": round(max_diff(a["acc"], b["acc"]), 4),
            "probe_seconds": {"reference": round(total_a, 2), "fast": round(total_b, 2)}, "reference": a, "fast": b}
    out["fast"] = fast_side = eval_side(*fast)
    if plain is None:
        return out
    ref = eval_side(*plain)
    sts_equal = all(v == fast_side["sts"][t] or (math.isnan(v) and math.isnan(fast_side["sts"][t]))
                    for t, v in ref["sts"].items())
    return {**out, "speedup_end_to_end": round(plain[1] / fast[1], 3),
            "max_abs_diff_transfer": round(max_diff(ref["acc"], fast_side["acc"]), 4),
            "sts_identical": sts_equal, "embeddings_identical": identical_embeddings,
            "wall_seconds": {"reference": round(plain[1], 2), "fast": round(fast[1], 2)},
            "speedup_per_phase": {k: round(ref["phases_seconds"][k] / fast_side["phases_seconds"][k], 3)
                                  for k in ("encode", "transfer", "total") if fast_side["phases_seconds"][k] > 0},
            "reference": ref}


def compare_precisions(model, tasks: str, workers: int, rounds: int) -> dict:
    """The fast path at fp32 and at bf16, alternating (a load change hits both), medians of the seconds."""
    runs: dict[str, list] = {"fp32": [], "bf16": []}
    for _ in range(rounds):
        for precision in runs:
            runs[precision].append(timed_eval(model, tasks, workers=workers, precision=precision))
    side = {p: {"wall_seconds": [round(w, 2) for _, w in done],
                "encode_seconds": [round(r["settings"]["seconds"]["encode"], 2) for r, _ in done],
                "sts": scores(done[-1][0], "sts"), "acc": scores(done[-1][0], "transfer")} for p, done in runs.items()}
    med = {p: {k: statistics.median(side[p][k]) for k in ("wall_seconds", "encode_seconds")} for p in side}
    return {"model": "all-MiniLM-L6-v2", "tasks": runs["fp32"][0][0]["settings"]["tasks"], "mode": "test",
            "rounds": rounds, "workers": workers,
            "speedup_end_to_end_bf16_vs_fp32": round(med["fp32"]["wall_seconds"] / med["bf16"]["wall_seconds"], 3),
            "speedup_encode_bf16_vs_fp32": round(med["fp32"]["encode_seconds"] / med["bf16"]["encode_seconds"], 3),
            "max_abs_diff_sts": round(max_diff(side["fp32"]["sts"], side["bf16"]["sts"]), 4),
            "max_abs_diff_transfer": round(max_diff(side["fp32"]["acc"], side["bf16"]["acc"]), 4), **side}


@case("sts", opt("--model", default=str(STAND_IN), help="model folder (pooler cls_before_pooler)"),
      opt("--fake", action="store_true", help="a hashed bag-of-words encoder instead of a model"),
      opt("--data-dir", default=None), opt("--quick", action="store_true", help="only STS13 and STS-B"),
      opt("--threads", type=positive, default=None, help="torch intra-op threads (default: torch's own)"))
def sts(args) -> None:
    """The STS suite: mixcse's evaluator vs SentEval's per-pair encoding loop, same encoder, same scores."""
    data_dir, batch_size = D.resolve_data_dir(args.data_dir), 64
    if args.threads:
        torch.set_num_threads(args.threads)
    tasks = ("STS13", "STSBenchmark") if args.quick else tuple(D.STS_SUBSETS) + ("STSBenchmark", "SICKRelatedness")
    if args.fake:
        encoder, name = HashedBagOfWords(), "hashed bag-of-words (256-d)"
    else:
        encoder = SentenceEncoder.load(args.model, pooler="cls_before_pooler")
        name = f"{args.model} (cls_before_pooler)"
    encoder.encode(D.load_stsb(data_dir, "dev").a[:128])  # warm-up on sentences of realistic lengths, untimed
    t0 = time.perf_counter()
    loop_scores, loop_encoded = per_pair_loop(encoder, data_dir, tasks, batch_size)
    loop_s, t0 = time.perf_counter() - t0, time.perf_counter()
    res = evaluate(encoder, tasks=list(tasks), data_dir=data_dir, batch_size=batch_size, verbose=False)
    eval_s = time.perf_counter() - t0
    ours = {t: {"spearman": res["sts"][t]["spearman"], "pearson": res["sts"][t]["pearson"]} for t in tasks}
    diff = max(abs(ours[t][k] - loop_scores[t][k]) for t in tasks for k in ("spearman", "pearson"))
    out = {"encoder": name, "tasks": list(tasks), "quick": args.quick, "batch_size": batch_size,
           "per_pair_loop": {"seconds": round(loop_s, 3), "sentences_encoded": loop_encoded},
           "evaluator": {"seconds": round(eval_s, 3),
                         "sentences_encoded": res["settings"]["encoding"]["distinct_sentences"],
                         "seconds_by_step": res["settings"]["seconds"]},
           "speedup": round(loop_s / eval_s, 2), "scores": {"evaluator": ours, "per_pair_loop": loop_scores},
           "max_abs_score_diff_x100": diff,
           "note": "SentEval (SimCSE's copy) additionally encodes STS-B and SICK train/dev; only test is timed here",
           "machine": {"cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                       "load_average_after": list(os.getloadavg())}}
    print(f"per-pair loop: {loop_s:.1f} s ({loop_encoded} encodings); evaluator: {eval_s:.1f} s; x{out['speedup']}")
    if not args.no_write:  # its own record (no command or machine description)
        common.RESULTS.mkdir(parents=True, exist_ok=True)
        (common.RESULTS / "sts_speed.json").write_text(json.dumps(out, indent=2) + "\n")
    if diff > (1e-9 if args.fake else 5e-3):  # a model's padding differs between batchings: float noise
        raise SystemExit(f"scores differ by {diff} (x100) between the two paths")


class HashedBagOfWords:
    """A cheap deterministic encoder: mean of fixed Gaussian vectors of hashed tokens."""

    def __init__(self):
        self.table = np.random.RandomState(0).randn(1 << 14, 256).astype(np.float32)

    def encode(self, sentences, batch_size=64):
        out = np.zeros((len(sentences), self.table.shape[1]), dtype=np.float32)
        for i, s in enumerate(sentences):
            idx = [zlib.crc32(t.encode("utf-8")) % len(self.table) for t in s.lower().split()]
            out[i] = self.table[idx].mean(0) if idx else 0.0
        return out


def per_pair_loop(encoder, data_dir: Path, tasks, batch_size: int) -> tuple[dict, int]:
    """SentEval's STS loop: per subset, sort pairs by (len a, len b, gold), encode each batch's two sides."""
    results, encoded = {}, 0
    for task in tasks:
        subsets = D.load_sts(data_dir, task) if task in D.STS_SUBSETS else {
            "test": D.load_stsb(data_dir, "test") if task == "STSBenchmark" else D.load_sick(data_dir)}
        sys_all, gold_all = [], []
        for ps in subsets.values():
            order = sorted(range(len(ps)), key=lambda i: (len(ps.a[i].split()), len(ps.b[i].split()), ps.scores[i]))
            for start in range(0, len(order), batch_size):
                idx = order[start:start + batch_size]
                ea = np.asarray(encoder.encode([ps.a[i] for i in idx], batch_size=batch_size), dtype=np.float32)
                eb = np.asarray(encoder.encode([ps.b[i] for i in idx], batch_size=batch_size), dtype=np.float32)
                encoded += 2 * len(idx)
                sys_all.append(row_cosine(ea, eb))
            gold_all.append(ps.scores[order])
        s, g = np.concatenate(sys_all), np.concatenate(gold_all)
        results[task] = {"spearman": spearman(s, g), "pearson": pearson(s, g)}
    return results, encoded


# ----------------------------------------------------------------------------------------- corpora and export


@case("disk-corpus", opt("--workdir", default=str(Path(tempfile.gettempdir()) / "mixcse-streaming")),
      opt("--quick", action="store_true", help="0.4M and 1.2M sentences only"),
      opt("--child", nargs=3, help=argparse.SUPPRESS))
def disk_corpus(args) -> None:
    """corpus: disk at 0.4M, 4M and 20M sentences: peak RSS (goal: 20M / 0.4M <= 1.2) and tokenisation speed."""
    if args.child:
        return corpus_child(*args.child)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(workdir / "cache", ignore_errors=True)  # every build is measured from scratch
    repeats = {"0p4m": 1, "1p2m": 3} if args.quick else {"0p4m": 1, "4m": 10, "20m": 50}
    lines = [line for _, line in iter_lines(CORPUS, what="corpus") if line]
    block = ("\n".join(lines) + "\n").encode("utf-8")
    rows = {}
    for name, times in repeats.items():
        path = workdir / f"corpus-{name}.txt"
        with open(path, "wb") as fh:
            for _ in range(times):
                fh.write(block)
        rows[name] = {"sentences": len(lines) * times, "disk": corpus_run(path, "disk", workdir)}
        if name in ("0p4m", "4m"):
            rows[name]["memory"] = corpus_run(path, "memory", workdir)
    largest = list(repeats)[-1]
    save(args, "streaming_quick" if args.quick else "streaming", {
        "setting": {"model": "stand-in (mini-wiki-mlm)", "batch_size": 64, "train_steps": 20, "max_seq_length": 32},
        f"peak_rss_ratio_{largest}_vs_0p4m": rows[largest]["disk"]["peak_rss_mb"] / rows["0p4m"]["disk"]["peak_rss_mb"],
        "tokenise_sentences_per_second": rows[largest]["disk"]["tokenise_sentences_per_second"], "rows": rows})
    shutil.rmtree(workdir, ignore_errors=True)


def corpus_run(train_file: Path, corpus: str, workdir: Path) -> dict:
    """One measured run (``corpus_child``) in a fresh process."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.speed", "disk-corpus", "--child", str(train_file), corpus,
                           str(workdir)], capture_output=True, text=True, cwd=common.REPO)
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    record = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    print(f"  {corpus:6s} {train_file.name}: peak RSS {record['peak_rss_mb']:.0f} MB", flush=True)
    return record


def corpus_child(train_file: str, corpus: str, workdir: str) -> None:
    """Tokenise into a new cache entry and reopen it (disk, timed), train 20 steps; prints one RESULT JSON line."""
    values = {"model": str(STAND_IN), "train_file": train_file, "batch_size": 64, "max_steps": 20,
              "select_on": "none", "log_steps": 10, "corpus": corpus, "corpus_cache_dir": f"{workdir}/cache",
              "num_threads": 2}
    record: dict = {"corpus": corpus}
    if corpus == "disk":
        tokenizer, cfg = load_backbone(str(STAND_IN))[1], TrainConfig(output_dir="-", **values)
        t0 = time.perf_counter()
        built, _ = open_corpus(cfg, tokenizer, progress=False)
        record["build_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        open_corpus(cfg, tokenizer, progress=False)
        record.update(reopen_s=time.perf_counter() - t0, sequences=len(built), tokens=built.stats["tokens"]["tokens"],
                      tokenise_sentences_per_second=len(built) / record["build_s"])
        del built, tokenizer
    out = Path(workdir) / f"run-{corpus}-{Path(train_file).stem}"
    t0 = time.perf_counter()
    result = trainer.train(values | {"output_dir": str(out)}, progress=False)
    record.update(train_s=time.perf_counter() - t0, steps=result.steps,
                  peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  workers_peak_rss_mb=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
    shutil.rmtree(out, ignore_errors=True)
    print("RESULT " + json.dumps(record), flush=True)


ONNX_FILES = {"torch fp32": "model.safetensors", "onnx fp32": "onnx/model.onnx",
              "onnx int8 per-channel": "onnx/model_qint8.onnx",
              "onnx int8 per-tensor": "onnx/model_qint8_per_tensor.onnx"}


@case("onnx", opt("--model", default=None, help="model folder (default all-MiniLM-L6-v2)"),
      opt("--name", default="all-MiniLM-L6-v2", help="its name in the JSON"),
      opt("--rounds", type=positive, default=5, help="timed rounds per side (default 5)"),
      opt("--eval", action="store_true", help="the two full evaluations instead of speed and quality"),
      opt("--table", action="store_true", help="print docs/performance.md's table from onnx.json"))
def onnx(args) -> None:
    """The ONNX export against torch: speed, file sizes, int8 quality, the full evaluation; merged into onnx.json."""
    path = common.RESULTS / "onnx.json"
    if args.table:
        return print(onnx_table(json.loads(path.read_text())))
    torch.set_num_threads(2)
    record = json.loads(path.read_text()) if path.exists() else {"benchmark": "onnx_speed"}
    entry = record.setdefault("models", {}).setdefault(args.name, {})
    with tempfile.TemporaryDirectory() as tmp:
        folder, per_tensor = Path(tmp) / "exported", Path(tmp) / "model_qint8_per_tensor.onnx"
        t0 = time.perf_counter()
        report = export_onnx(args.model or common.minilm_path(), folder, quantize="int8")
        entry["export"] = {"seconds": round(time.perf_counter() - t0, 1), "inputs": report["inputs"],
                           "max_rel_diff_check": report["max_rel_diff"]}
        quantize_int8(folder / "onnx" / "model.onnx", per_tensor, per_channel=False)
        entry["file_mb"] = {**{k: round(v / 1e6, 1) for k, v in report["files"].items()},
                            ONNX_FILES["onnx int8 per-tensor"]: round(per_tensor.stat().st_size / 1e6, 1),
                            "model.safetensors": round((folder / "model.safetensors").stat().st_size / 1e6, 1)}
        if args.eval:
            entry["eval"] = onnx_full_eval(folder)
        else:
            encoders = onnx_encoders(folder, per_tensor)
            sentences = list(dict.fromkeys(D.load_stsb(DOWNSTREAM, "test").sentences()))
            entry["speed"] = onnx_speed(encoders, sentences, args.rounds)
            entry["quality"] = onnx_quality(encoders, sentences)
            entry["quality_sentences"] = f"{len(sentences)} distinct STS-B test sentences"
    record.update(date=time.strftime("%Y-%m-%d %H:%M:%S"), code=common.code_version(), threads=2,
                  machine=common.machine_info())
    entry["updated"] = record["date"]
    print(json.dumps(entry, indent=1))
    if not args.no_write:
        common.RESULTS.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=2) + "\n")


def onnx_encoders(folder: Path, per_tensor: Path) -> dict:
    pt = OnnxSentenceEncoder.load(folder, precision="int8", threads=2)
    pt.graph, pt.fingerprint = open_graph(per_tensor, 2), pt.fingerprint + "-per-tensor"
    return {"torch fp32": SentenceEncoder.load(folder, device="cpu"),
            "onnx fp32": SentenceEncoder.load(folder, backend="onnx", threads=2),
            "onnx int8 per-channel": SentenceEncoder.load(folder, backend="onnx", precision="int8", threads=2),
            "onnx int8 per-tensor": pt}


def onnx_speed(encoders: dict, sentences: list[str], rounds: int) -> dict:
    out = {}
    for batch, n in ((1, 64), (64, 256)):
        times = interleaved({name: (lambda e=e: e.encode(sentences[:n], batch_size=batch))
                             for name, e in encoders.items()}, repeats=rounds)
        out[f"batch_{batch}"] = {
            "sentences": n,
            "sentences_per_second": {k: round(n / summarise(v)["median"], 1) for k, v in times.items()},
            "speedup_vs_torch": {k: round(float(np.median(paired_ratios(times["torch fp32"], v))), 2)
                                 for k, v in times.items() if k != "torch fp32"}}
    return out


def onnx_quality(encoders: dict, sentences: list[str]) -> dict:
    from sklearn.metrics import average_precision_score

    with open(common.SHARED / "data/domain/medical-questions/pairs/test.tsv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))
    labels = np.asarray([int(r["label"]) for r in rows])
    reference, out = encoders["torch fp32"].encode(sentences), {}
    for name, enc in encoders.items():
        emb = enc.encode(sentences)
        cos = row_cosine(emb, reference)
        pair_cos = row_cosine(enc.encode([r["sentence1"] for r in rows]), enc.encode([r["sentence2"] for r in rows]))
        sts_avg = evaluate(enc, tasks="sts", data_dir=DOWNSTREAM, verbose=False)["sts"]["avg"]
        retrieval = evaluate(enc, tasks="retrieval", retrieval_data=common.SHARED / "data/domain/scifact",
                             verbose=False)["retrieval"]
        out[name] = {"cosine_to_torch_fp32": {"min": round(float(cos.min()), 4), "mean": round(float(cos.mean()), 4)},
                     "max_abs_diff_to_torch_fp32": float(np.abs(emb - reference).max()), "sts_avg": round(sts_avg, 2),
                     "mqp_test_pair_ap": round(100 * average_precision_score(labels, pair_cos), 2),
                     "scifact_test_ndcg@10": round(retrieval["ndcg@10"], 2)}
    return out


def onnx_full_eval(folder: Path) -> dict:
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for backend in ("torch", "onnx"):
            out, t0 = Path(tmp) / f"{backend}.json", time.perf_counter()
            subprocess.run([sys.executable, "-m", "mixcse", "eval", str(folder), "--backend", backend, "--output",
                            str(out)], check=True, stdout=subprocess.DEVNULL)
            res = json.loads(out.read_text())
            runs[backend] = {"wall_seconds": round(time.perf_counter() - t0, 1),
                             "phases_seconds": res["settings"]["seconds"], "sts": res["sts"],
                             "transfer_acc": scores(res, "transfer"), "transfer_avg": res["transfer"]["avg"]}
    t, o = runs["torch"], runs["onnx"]
    return {"command": "python -m mixcse eval MODEL --backend torch|onnx (all 14 tasks, default settings)",
            "runs": runs, "max_abs_diff_sts": round(max_diff(scores(t, "sts"), scores(o, "sts")), 4),
            "max_abs_diff_transfer": round(max_diff(t["transfer_acc"], o["transfer_acc"]), 4),
            "speedup_end_to_end": round(t["wall_seconds"] / o["wall_seconds"], 2),
            "speedup_encode": round(t["phases_seconds"]["encode"] / o["phases_seconds"]["encode"], 2)}


def onnx_table(record: dict) -> str:
    """The markdown table of docs/performance.md, from onnx.json."""
    lines = []
    for model, e in record["models"].items():
        if "speed" not in e:
            continue
        lines += [f"{model}, {record['threads']} threads ({record['machine']['cpu']}, {record['date'][:10]}):", "",
                  "| | file MB | batch 1: sent/s (× torch) | batch 64: sent/s (× torch) | cosine to torch min / mean "
                  "| STS avg | MQP pair AP | SciFact nDCG@10 |", "|---|---|---|---|---|---|---|---|"]
        for name, q in e["quality"].items():
            cells = [name, f"{e['file_mb'][ONNX_FILES[name]]:.1f}"]
            for b in ("batch_1", "batch_64"):
                speed, ratio = e["speed"][b]["sentences_per_second"][name], e["speed"][b]["speedup_vs_torch"].get(name)
                cells.append(f"{speed:.1f}" + (f" ({ratio:.2f}×)" if ratio else ""))
            cells += [f"{q['cosine_to_torch_fp32']['min']:.4f} / {q['cosine_to_torch_fp32']['mean']:.4f}",
                      f"{q['sts_avg']:.2f}", f"{q['mqp_test_pair_ap']:.2f}", f"{q['scifact_test_ndcg@10']:.2f}"]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------- the CLI


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m benchmarks.speed", description=__doc__.split("\n\n")[0])
    cases = top.add_subparsers(dest="case", required=True, metavar="CASE")
    for name, (fn, options) in CASES.items():
        sub = cases.add_parser(name, help=fn.__doc__, description=fn.__doc__)
        sub.add_argument("--results", type=Path, help="folder of the JSON (default benchmarks/results)")
        sub.add_argument("--no-write", action="store_true", help="write no JSON")
        for flags, kw in options:
            sub.add_argument(*flags, **kw)
    return top


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.results:
        common.RESULTS = args.results
    CASES[args.case][0](args)


if __name__ == "__main__":
    main()
