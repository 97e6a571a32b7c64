"""Speed and memory of mixcse: the training step, big batches, large corpora, evaluation and the ONNX export.

``python -m benchmarks.speed CASE`` (``--help`` lists the cases, ``CASE --help`` their options): each prints its
figures and writes benchmarks/results/NAME.json (``--results DIR`` elsewhere, ``--no-write`` nowhere); methods and
figures: docs/performance.md and docs/scale.md. Run them alone: anything else on the cores moves the timings.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import math
import multiprocessing
import os
import resource
import shutil
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from importlib.metadata import version
from pathlib import Path
from typing import Callable
from unittest import mock

import numpy as np
import torch
import yaml

from benchmarks import common
from benchmarks.common import CORPUS, DOWNSTREAM, STAND_IN, interleaved, paired_ratios, read_corpus, summarise
from mixcse.data.loader import BatchPlan, CorpusLoader
from mixcse.data.memory import TokenizedCorpus
from mixcse.data.reader import iter_lines
from mixcse.evaluation import evaluate
from mixcse.evaluation import senteval as D
from mixcse.evaluation.sts import row_cosine
from mixcse.models.export import export_onnx, quantize_int8
from mixcse.losses import PRESETS, contrastive_loss, materialised_mixcse_loss
from mixcse.models.encoder import load_backbone
from mixcse.models.onnx_backend import OnnxSentenceEncoder, open_graph
from mixcse.models.sentence_encoder import SentenceEncoder
from mixcse.training import trainer
from mixcse.training.config import TrainConfig, build_config
from mixcse.training.distributed import DistContext, init_from_env
from mixcse.training.rundir import MetricsLog
from mixcse.training.step import make_step
from mixcse.evaluation.tasks import STS_TASKS, TRANSFER_TASKS

CASES: dict[str, tuple[Callable, dict]] = {}
MAX_LEN = 32  # every CPU step case: the stand-in at length 32
THREADS = 2  # torch threads of every case: the figures in the docs come from 2-vCPU machines


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text}")
    return int(text)


def case(name: str, /, quick: str | None = None, **options: dict):
    """Register ``fn(args)`` as the case ``name``; ``options``: add_argument's keywords per option (mini_batch:
    --mini-batch); ``quick``: what --quick leaves out."""
    if quick:
        options["quick"] = {"action": "store_true", "help": f"a short run: {quick}"}

    def register(fn):
        CASES[name] = (fn, options)
        return fn
    return register


def save(args, name: str, payload: dict) -> None:
    """Print the payload's top-level figures; write it (with the mode, in a case with --quick) unless --no-write."""
    payload = {"mode": "quick" if args.quick else "default", **payload} if "quick" in args else payload
    figures = {k: v["median"] if isinstance(v, dict) else v for k, v in payload.items()
               if isinstance(v, float) or isinstance(v, dict) and "median" in v}
    print(", ".join(f"{k} {v:.4g}" for k, v in figures.items()), flush=True)
    if not args.no_write:
        common.write_result(name, payload)


def median_ratio(num: list[float], den: list[float]) -> float:
    """The median of the per-round ratios num[i] / den[i] of two interleaved series."""
    return summarise(paired_ratios(num, den))["median"]


def two_sides(fns: dict[str, Callable], rounds: int, ratio: str, suffix: str = "_step_s") -> dict:
    """Two functions timed interleaved: each one's summary (name + ``suffix``), second / first ratios, raw times."""
    (a, b), times = fns, interleaved(fns, repeats=rounds, warmup=1)
    ratios = paired_ratios(times[b], times[a])
    return {f"{a}{suffix}": summarise(times[a]), f"{b}{suffix}": summarise(times[b]), ratio: summarise(ratios),
            "raw": {**times, ratio: ratios}}


def recipe(**overrides) -> dict:
    """The CPU recipe (recipes/cpu/mixcse-mini.yaml) on the shared stand-in and corpus, ``overrides`` applied."""
    cfg = yaml.safe_load((common.REPO / "recipes/cpu/mixcse-mini.yaml").read_text())
    return {**cfg, "model": str(STAND_IN), "train_file": str(CORPUS), **overrides}


def recipe_steps(variants: dict[str, dict], **overrides) -> dict[str, Callable]:
    """Per ``make_step`` kwargs of ``variants``, the trainer's step (stand-in, cls + MLP, ``overrides``) on a batch."""
    cfg, ctx = TrainConfig(model=str(STAND_IN), pooler="cls", **overrides), DistContext()
    encoder, tokenizer, optimizer = common.model_setup(cfg, ctx, THREADS, seed=0)
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


@case("mixing", rounds=dict(type=positive, help="step rounds (default 20)"),
      quick="2 step rounds; the loss at N = 64, 256, 1024, timed to 256")
def mixing(args) -> None:
    """MixCSE vs SimCSE: step time (target <= 1.05x) and loss memory (target >= 100x less at N = 1024)."""
    t0 = time.perf_counter()
    rounds = args.rounds or (2 if args.quick else 20)
    meter_mb = common.check_peak_meter()
    torch.set_num_threads(1)  # the loss's small N x N kernels: thread wake-ups dominate on a shared machine
    loss = {str(n): loss_size(n, 768, 2 if args.quick else 5, timed=not args.quick or n <= 256)
            for n in ([64, 256, 1024] if args.quick else [64, 128, 256, 512, 1024])}
    steps = recipe_steps({n: {"objective": PRESETS[n]} for n in ("simcse", "mixcse")}, max_grad_norm=None)
    step = {"batch_shape": [128, MAX_LEN], "threads": THREADS, "rounds": rounds, **two_sides(steps, rounds, "ratio")}
    save(args, "mixing_overhead", {
        "step_time_ratio": step["ratio"]["median"], "memory_ratio_n1024": loss["1024"]["memory_ratio"],
        "targets": {"step_time_ratio_max": 1.05, "memory_ratio_n1024_min": 100},
        "memory_method": "torch.profiler(profile_memory=True) allocator events, running-sum peak", "loss_threads": 1,
        "peak_meter_selftest_mb": meter_mb, "step": step, "loss": loss, "wall_s": time.perf_counter() - t0})


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
        r.update(two_sides({"closed_form": lambda: run(closed), "materialised": lambda: run(materialised)}, repeats,
                           "time_ratio_materialised_over_closed", suffix="_s"))
    print(f"  loss N={n:5d}: peak {r['closed_form_peak_mb']:7.1f} MB closed form vs {r['materialised_peak_mb']:7.1f} "
          f"MB materialised (x{r['memory_ratio']:.0f})", flush=True)
    return r


@case("compiled")
def compiled(args) -> None:
    """The compiled CPU step (compile: true: inductor, batches padded to 32) against the eager one, 10 rounds."""
    rounds, steps = 10, {name: recipe_steps({"step": {}}, compile=flag)["step"]
                         for name, flag in (("eager", False), ("compiled", True))}
    steps["eager"]()  # the first calls are not timed with the others: the compiled step compiles in its first
    t0 = time.perf_counter()
    steps["compiled"]()
    compile_s = time.perf_counter() - t0
    save(args, "compiled_step", {
        "setting": {"model": "stand-in (mini-wiki-mlm)", "batch": 64, "max_seq_length": MAX_LEN,
                    "threads": THREADS, "rounds": rounds},
        "compile_seconds": compile_s, **two_sides(steps, rounds, "compiled_over_eager")})


@case("bf16", quick="speed only, 2 rounds")
def bf16(args) -> None:
    """bf16 autocast vs fp32 on CPU: step speed and STS-B dev parity."""
    t0 = time.perf_counter()
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    rounds = 2 if args.quick else 10
    steps = recipe_steps({p: {"objective": PRESETS["mixcse"], "precision": p} for p in ("bf16", "fp32")})
    speed = {"rounds": rounds, "threads": THREADS, **two_sides(steps, rounds, "speedup_bf16")}  # fp32 s / bf16 s
    payload = {"isa": {f: f" {f}" in flags for f in ("avx512_bf16", "amx_bf16", "amx_tile", "avx512f")},
               "cpu_supports_bf16": trainer.cpu_supports_bf16(),
               "auto_resolves_to": trainer.resolve_precision("auto", torch.device("cpu")),
               "speed": speed, "speedup_bf16": speed["speedup_bf16"]["median"]}
    if not args.quick:
        payload["quality"] = bf16_quality(125, [42, 43])
        payload["within_seed_noise"] = payload["quality"]["within_seed_noise"]
    save(args, "bf16_parity", {**payload, "wall_s": time.perf_counter() - t0})


def bf16_quality(steps: int, seeds: list[int]) -> dict:
    """The recipe cut to ``steps`` in fp32 and bf16 per seed: STS-B dev of the trained models, gap vs seed spread."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="mixcse-bf16-") as workdir:
        for seed in seeds:
            for precision in ("fp32", "bf16"):
                cfg = recipe(data_dir=str(DOWNSTREAM), output_dir=f"{workdir}/{precision}-{seed}", max_steps=steps,
                             eval_steps=steps, seed=seed, precision=precision, num_threads=THREADS)
                t0 = time.perf_counter()
                with contextlib.redirect_stdout(io.StringIO()):
                    result = trainer.train(cfg, overwrite=True, progress=False)
                # the trained model's score (best_dev may be the start model's, always a candidate)
                final = [r for r in MetricsLog(Path(result.output_dir) / "metrics.jsonl").records() if "stsb_dev" in r]
                runs.append({"seed": seed, "precision": precision, "stsb_dev": final[-1]["stsb_dev"],
                             "raw_dev": result.raw_dev, "train_seconds": result.train_seconds,
                             "sentences_per_second": result.sentences_per_second, "wall_s": time.perf_counter() - t0})
                print(f"  seed {seed} {precision}: STS-B dev {runs[-1]['stsb_dev']:.2f}", flush=True)
    by = {p: [r["stsb_dev"] for r in runs if r["precision"] == p] for p in ("fp32", "bf16")}
    mean = {p: float(np.mean(v)) for p, v in by.items()}
    spread, gap = max(max(v) - min(v) for v in by.values()), mean["bf16"] - mean["fp32"]
    return {"steps": steps, "seeds": seeds, "runs": runs, "mean_dev": mean, "bf16_minus_fp32": gap,
            "paired_gaps_same_seed": [b - f for f, b in zip(by["fp32"], by["bf16"])],
            "seed_spread_within_precision": spread, "within_seed_noise": abs(gap) <= spread,
            "raw_model_dev": next((r["raw_dev"] for r in runs if r["raw_dev"] is not None), None)}


PHASES = ["tokenisation (amortised)", "collation (pad + 2 views)", "forward", "loss", "backward", "grad clip",
          "optimizer step (AdamW)", "scheduler + zero_grad", "logging (amortised)", "progress/bookkeeping"]


@case("profile", ops=dict(action="store_true", help="also torch.profiler's top operators of a step"), quick="6 steps")
def profile(args) -> None:
    """Where the time of a CPU training step goes, phase by phase."""
    steps, warmup = 6 if args.quick else 30, 2
    cfg, ctx = build_config(recipe(num_threads=THREADS, precision="fp32")), init_from_env()
    sentences = read_corpus((steps + warmup) * cfg.batch_size)  # the corpus's first lines: what a run tokenises
    plan = BatchPlan(len(sentences), cfg.batch_size, cfg.seed)
    encoder, tokenizer, optimizer = common.model_setup(cfg, ctx, cfg.num_threads, cfg.seed)
    t0 = time.perf_counter()
    corpus = TokenizedCorpus(sentences, tokenizer, cfg.max_seq_length, plan.used_indices(steps + warmup))
    tokenise_s, train_step = time.perf_counter() - t0, make_step(cfg, ctx, encoder, optimizer)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, trainer.linear_schedule(steps + warmup, 0))
    per_step, log_times = profile_loop(cfg, corpus, plan, scheduler, train_step, steps, warmup)
    amortised = {"tokenisation (amortised)": [tokenise_s / (steps + warmup)],
                 "logging (amortised)": [sum(log_times) / len(per_step)]}
    phases = {p: summarise(amortised.get(p) or [s[p] for s in per_step]) for p in PHASES}
    backward = {k: summarise([s["backward"] for s in per_step if s["_logging_step"] == (k == "logging")]
                             or [float("nan")]) for k in ("logging", "other")}
    result = {"steps": len(per_step), "warmup_steps": warmup, "threads": THREADS, "log_steps": cfg.log_steps,
              "phases_ms": {k: v["median"] * 1e3 for k, v in phases.items()}, "phases": phases,
              "step_total_s": summarise([sum(v for k, v in s.items() if not k.startswith("_")) for s in per_step]),
              "backward_logging_vs_other_steps_s": backward}
    if args.ops:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            train_step(corpus.batch(plan.indices(0)[:cfg.batch_size]))
        result["top_ops"] = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20)
        print(result["top_ops"])
    print("\n".join(f"  {phase:32s} {ms:9.1f} ms" for phase, ms in result["phases_ms"].items()))
    previous = common.RESULTS / "profile_step.json"  # its AdamW comparison (runnable at commit f83854b) stays
    if previous.exists():
        result.update({k: v for k, v in json.loads(previous.read_text()).items() if k == "adamw"})
    save(args, "profile_step", result)


def profile_loop(cfg, corpus, plan, scheduler, train_step, steps: int, warmup: int):
    """The trainer's loop, stamped after each phase: (each measured step's phase seconds, its logging seconds)."""
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
            t, out = time.perf_counter(), result.loss
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


@case("big-batch", mini_batch=dict(type=positive, default=64), quick="N <= 256, one round")
def big_batch(args) -> None:
    """The cached step (mini_batch_size K) against the one-pass step: memory and time against the batch size."""
    k = args.mini_batch
    max_onepass, max_cached, n, rounds = (128, 256, 128, 1) if args.quick else (1024, 4096, 512, 3)
    meter_mb = common.check_peak_meter()
    sizes = [size for size in (64, 128, 256, 512, 1024, 2048, 4096) if size <= max_cached]
    onepass = [measure_step(train_step(size, None, "mixcse"), size) for size in sizes if size <= max_onepass]
    cached = [measure_step(train_step(size, k, "mixcse"), size) for size in sizes if size >= k]
    sides = {"onepass_mixcse": train_step(n, None, "mixcse"), "cached_mixcse": train_step(n, k, "mixcse"),
             "cached_simcse": train_step(n, k, "simcse"), "st_cached_simcse": st_cached_step(n, k)}
    times = interleaved(sides, repeats=rounds, warmup=1)
    peaks = {name: common.peak_cpu_bytes(step)[0] / 1e6 for name, step in sides.items()}
    save(args, "big_batch_quick" if args.quick else "big_batch", {
        "setting": {"model": "stand-in (mini-wiki-mlm)", "pooler": "cls + MLP head", "max_seq_length": MAX_LEN,
                    "mini_batch_size": k, "threads": THREADS, "rounds": rounds, "peak_meter_selftest_mb": meter_mb},
        f"peak_memory_ratio_{sizes[-1]}_cached_vs_64": cached[-1]["peak_mb"] / onepass[0]["peak_mb"],
        "time_per_sentence_ratio_cached_vs_onepass": median_ratio(times["cached_mixcse"], times["onepass_mixcse"]),
        "time_ratio_measured_at_batch": n,
        "st_time_ratio_vs_mixcse_cached_simcse": median_ratio(times["st_cached_simcse"], times["cached_simcse"]),
        "side_by_side": {name: {"peak_mb": peaks[name], "step_s": summarise(times[name]),
                                "sentences_per_s": n / summarise(times[name])["median"]} for name in sides},
        "sweep": {"onepass_mixcse": onepass, "cached_mixcse": cached}, "raw_times": times})


def train_step(n: int, mini_batch: int | None, loss: str) -> Callable:
    """The trainer's step on a batch of ``n`` (``mini_batch`` None = one pass)."""
    return recipe_steps({"step": {}}, loss=loss, batch_size=n, mini_batch_size=mini_batch)["step"]


def st_cached_step(n: int, mini_batch: int) -> Callable:
    """sentence-transformers' cached SimCSE step: loss forward + backward + clipping + AdamW step, dropout on."""
    from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss

    quiet()
    torch.set_num_threads(THREADS)
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


@case("vs-st", quick="1 round x 2 steps, no warm-up run, no ablation")
def vs_st(args) -> None:
    """mixcse vs sentence-transformers on the same SimCSE run: sentences/s (target >= 1.2x)."""
    quiet()
    t0 = time.perf_counter()
    rounds, steps = (1, 2) if args.quick else (8, 10)
    sides = ["mixcse", "sentence_transformers"] + ([] if args.quick else ["mixcse_one_pass"])
    runs = {side: [] for side in sides}
    with tempfile.TemporaryDirectory(prefix="mixcse-vs-st-") as tmp:
        workdir, train_file = Path(tmp), Path(tmp) / "train.txt"
        for r in range(0 if args.quick else -1, rounds):  # round -1: the untimed one-step warm-up
            n = 64 * (steps if r >= 0 else 1)  # every side trains on the same n corpus lines, new ones each round
            sentences = read_corpus(n, skip=(r + 1) * n)
            train_file.write_text("\n".join(sentences) + "\n")
            for side in sides if r % 2 else sides[::-1]:
                cpu0 = time.process_time()
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    res = (run_peer(sentences, workdir, r + 1) if side == "sentence_transformers"
                           else run_mixcse(train_file, n // 64, workdir, r + 1, one_pass=side == "mixcse_one_pass"))
                res.update(process_cpu_s=time.process_time() - cpu0, sentences_per_s=n / res["run_s"],
                           loop_sentences_per_s=n / res["loop_s"])  # CPU time: all threads, model load included
                print(f"  round {r + 1} {side:22s} {res['sentences_per_s']:6.1f} sentences/s", flush=True)
                runs[side] += [res] if r >= 0 else []
                for sub in ("mixcse", "peer"):
                    shutil.rmtree(workdir / sub, ignore_errors=True)
    save(args, "vs_sentence_transformers", {
        "rounds": rounds, "steps_per_run": steps, "batch_size": 64, "max_seq_length": MAX_LEN, "precision": "fp32",
        "threads": THREADS, "timing": "model load excluded from both; data prep, tokenisation, trainer set-up, steps "
                                      "and mixcse's final checkpoint/model writes included",
        "versions": {name: version(name) for name in ("sentence_transformers", "transformers", "datasets")},
        "peer_info": runs["sentence_transformers"][0]["info"], **vs_st_summary(runs), "target": 1.2, "raw": runs,
        "wall_s": time.perf_counter() - t0})


def run_peer(sentences: list[str], workdir: Path, seed: int) -> dict:
    """SentenceTransformerTrainer + MultipleNegativesRankingLoss on ``sentences`` (batch 64), the model load apart."""
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

    torch.set_num_threads(THREADS)
    t0 = time.perf_counter()
    model = st_model()
    t1 = time.perf_counter()
    args = SentenceTransformerTrainingArguments(
        output_dir=str(workdir / "peer"), per_device_train_batch_size=64, max_steps=len(sentences) // 64,
        learning_rate=3e-5, weight_decay=0.0, lr_scheduler_type="linear", max_grad_norm=1.0, logging_steps=10,
        save_strategy="no", eval_strategy="no", report_to="none", use_cpu=True, bf16=False, fp16=False,
        disable_tqdm=True, dataloader_drop_last=True, seed=seed)
    clock = Clock()
    peer = SentenceTransformerTrainer(model=model, args=args, callbacks=[clock],
                                      train_dataset=Dataset.from_dict({"anchor": sentences, "positive": sentences}),
                                      loss=MultipleNegativesRankingLoss(model, scale=20.0))
    peer.train()
    t2 = time.perf_counter()
    assert peer.state.global_step == args.max_steps, peer.state.global_step
    info = {"optimizer": type(getattr(peer.optimizer, "optimizer", peer.optimizer)).__name__, "optim": str(args.optim),
            "attn_implementation": model[0].model.config._attn_implementation, "threads_after": torch.get_num_threads()}
    return {"load_s": t1 - t0, "run_s": t2 - t1, "loop_s": clock.last - clock.begin, "setup_s": clock.begin - t1,
            "info": info}


def run_mixcse(train_file: Path, steps: int, workdir: Path, seed: int, one_pass: bool) -> dict:
    """`mixcse.train` on the peer's settings (``one_pass``: length_buckets 1), the model load timed apart."""
    load_time, original = [], trainer.load_encoder

    def timed_load(*args, **kwargs):
        t = time.perf_counter()
        result = original(*args, **kwargs)
        load_time.append(time.perf_counter() - t)
        return result

    config = {"model": str(STAND_IN), "train_file": str(train_file), "output_dir": str(workdir / "mixcse"),
              "loss": "simcse", "temperature": 0.05, "pooler": "cls_before_pooler", "batch_size": 64,
              "max_seq_length": MAX_LEN, "learning_rate": 3e-5, "weight_decay": 0.0, "warmup_ratio": 0.0,
              "max_grad_norm": 1.0, "max_steps": steps, "precision": "fp32", "num_threads": THREADS,
              "select_on": "none", "log_steps": 10, "seed": seed, **({"length_buckets": 1} if one_pass else {})}
    t0 = time.perf_counter()
    with mock.patch.object(trainer, "load_encoder", timed_load):
        result = trainer.train(config, overwrite=True, progress=False)
    total = time.perf_counter() - t0
    assert result.steps == steps, result.steps
    return {"load_s": load_time[0], "run_s": total - load_time[0], "loop_s": result.train_seconds,
            "outside_loop_s": total - load_time[0] - result.train_seconds}


def vs_st_summary(runs: dict) -> dict:
    """Each side's sentences/s and the medians of per-round ratios: whole run, loop only, CPU time, the ablation."""
    def col(side, key="sentences_per_s"):
        return [r[key] for r in runs[side]]

    def ratio(a, b, key="sentences_per_s", name="ratio"):
        per_round = paired_ratios(col(a, key), col(b, key))
        return {name: summarise(per_round)["median"], f"{name}_per_round": per_round}

    mx, st, one, loop = "mixcse", "sentence_transformers", "mixcse_one_pass", "loop_sentences_per_s"
    out = {"mixcse_sentences_per_s": summarise(col(mx)), "sentence_transformers_sentences_per_s": summarise(col(st)),
           **ratio(mx, st, name="throughput_ratio"),
           "loop_only": {"mixcse_sentences_per_s": summarise(col(mx, loop)),
                         "sentence_transformers_sentences_per_s": summarise(col(st, loop)), **ratio(mx, st, loop)},
           "cpu_time": {"note": "process CPU seconds of each whole run (model load included), peer / mixcse: less "
                                "sensitive than wall time to other processes' load, more to spin-waiting threads",
                        **ratio(st, mx, "process_cpu_s")}}
    if one in runs:
        out["ablation_one_pass"] = {
            "note": "mixcse with length_buckets=1: each batch forwarded as one pass padded to its longest sentence",
            "sentences_per_s": summarise(col(one)), **ratio(one, st, name="throughput_ratio"),
            "default_over_one_pass": ratio(mx, one)["ratio"]}
    return out


@case("eval")
def eval_speed(args) -> None:
    """A full evaluation of all-MiniLM-L6-v2 on the reference paths and on the fast ones (2 workers), side by side."""
    with tempfile.TemporaryDirectory() as tmp:
        model, ref_cache, fast_cache = common.minilm_path(), Path(tmp) / "reference", Path(tmp) / "fast"
        fast = timed_eval(model, "all", cache_dir=fast_cache, workers=2)  # first: sklearn-converged reads its cache
        record = {"model": "all-MiniLM-L6-v2", "tasks": fast[0]["settings"]["tasks"], "mode": "test", "complete": False,
                  "protocol": "senteval-pytorch (the default)", "workers": {"reference": 1, "fast": 2}}
        a, b = (eval_side(*timed_eval(model, "transfer", classifier="sklearn-converged", reference=reference,
                                      cache_dir=fast_cache)) for reference in (True, False))
        total_a, total_b = sum(a["seconds"].values()), sum(b["seconds"].values())
        record["sklearn_converged"] = {
            "speedup_probes": round(total_a / total_b, 3),
            "max_abs_diff_transfer": round(max_diff(a["acc"], b["acc"]), 4),
            "probe_seconds": {"reference": round(total_a, 2), "fast": round(total_b, 2)}, "reference": a, "fast": b}
        record["fast"] = fast_side = eval_side(*fast)
        save(args, "eval_speed", record)  # the reference side takes longest: the fast figures are kept meanwhile
        plain = timed_eval(model, "all", reference=True, cache_dir=ref_cache)
        ref = eval_side(*plain)
        save(args, "eval_speed", {
            **record, "complete": True, "speedup_end_to_end": round(plain[1] / fast[1], 3),
            "max_abs_diff_transfer": round(max_diff(ref["acc"], fast_side["acc"]), 4),
            "sts_identical": ref["sts"].keys() == fast_side["sts"].keys()
            and all(np.array_equal(ref["sts"][t], fast_side["sts"][t], equal_nan=True) for t in ref["sts"]),
            "embeddings_identical": same_units(ref_cache, fast_cache),
            "wall_seconds": {"reference": round(plain[1], 2), "fast": round(fast[1], 2)},
            "speedup_per_phase": {k: round(ref["phases_seconds"][k] / fast_side["phases_seconds"][k], 3)
                                  for k in ("encode", "transfer", "total") if fast_side["phases_seconds"][k] > 0},
            "reference": ref})


def timed_eval(model, tasks: str, **kw) -> tuple[dict, float]:
    t0 = time.perf_counter()
    res = evaluate(model, tasks=tasks, data_dir=DOWNSTREAM, verbose=False, **kw)
    wall = time.perf_counter() - t0
    print(f"{tasks} ({', '.join(f'{k}={v}' for k, v in kw.items() if k != 'cache_dir')}): {wall:.1f} s", flush=True)
    return res, wall


def scores(res: dict, part: str) -> dict:
    return {t: v["spearman" if part == "sts" else "acc"] for t, v in res.get(part, {}).items() if t != "avg"}


def max_diff(a: dict, b: dict) -> float:
    return max((abs(a[k] - b[k]) for k in a if k in b), default=0.0)


def eval_side(res: dict, wall: float) -> dict:
    """One evaluation's phases, scores and transfer seconds (its per-task times overlap with workers: not a sum)."""
    sec = res["settings"]["seconds"]
    phases = {"load_data": sec.get("load_data", 0.0), "encode": sec.get("encode", 0.0),
              "sts_and_analysis": sum(sec.get(t, 0.0) for t in STS_TASKS + ("analysis",)), "total": sec["total"]}
    phases["transfer"] = phases["total"] - phases["load_data"] - phases["encode"] - phases["sts_and_analysis"]
    return {"wall_seconds": round(wall, 2), "phases_seconds": phases, "encoding": res["settings"]["encoding"],
            "sts": scores(res, "sts"), "seconds": {t: sec[t] for t in TRANSFER_TASKS if t in sec},
            "acc": scores(res, "transfer"), "cpu_seconds": res["settings"]["cpu_seconds"],
            "chosen_reg": {t: v.get("chosen_reg") for t, v in res.get("transfer", {}).items() if t != "avg"}}


def same_units(a: Path, b: Path) -> bool:
    files = sorted(p.relative_to(a) for p in a.rglob("unit-*.npy"))
    return bool(files) and files == sorted(p.relative_to(b) for p in b.rglob("unit-*.npy")) and \
        all(np.array_equal(np.load(a / f), np.load(b / f)) for f in files)


@case("disk-corpus", workdir=dict(default=str(Path(tempfile.gettempdir()) / "mixcse-streaming")),
      quick="0.4M and 1.2M sentences only")
def disk_corpus(args) -> None:
    """corpus: disk at 0.4M, 4M and 20M sentences: peak RSS (goal: 20M / 0.4M <= 1.2) and tokenisation speed."""
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
            fh.writelines([block] * times)
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
    """One measured run (``corpus_child``) in a fresh process: its peak RSS is the run's own."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        record = pool.submit(corpus_child, str(train_file), corpus, str(workdir)).result()
    print(f"  {corpus:6s} {train_file.name}: peak RSS {record['peak_rss_mb']:.0f} MB", flush=True)
    return record


def corpus_child(train_file: str, corpus: str, workdir: str) -> dict:
    """Tokenise into a new cache entry and reopen it (disk, timed), train 20 steps; the measures."""
    values = {"model": str(STAND_IN), "train_file": train_file, "batch_size": 64, "max_steps": 20, "select_on": "none",
              "log_steps": 10, "corpus": corpus, "corpus_cache_dir": f"{workdir}/cache", "num_threads": THREADS}
    record: dict = {"corpus": corpus}
    if corpus == "disk":
        tokenizer, cfg = load_backbone(str(STAND_IN))[1], TrainConfig(output_dir="-", **values)
        t0 = time.perf_counter()
        built, _ = CorpusLoader(cfg).open(tokenizer, progress=False)
        record["build_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        CorpusLoader(cfg).open(tokenizer, progress=False)
        record.update(reopen_s=time.perf_counter() - t0, sequences=len(built), tokens=built.stats["tokens"]["tokens"],
                      tokenise_sentences_per_second=len(built) / record["build_s"])
        del built, tokenizer
    out = Path(workdir) / f"run-{corpus}-{Path(train_file).stem}"
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        result = trainer.train(values | {"output_dir": str(out)}, progress=False)
    record.update(train_s=time.perf_counter() - t0, steps=result.steps,
                  peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  workers_peak_rss_mb=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
    shutil.rmtree(out, ignore_errors=True)
    return record


ONNX_FILES = {"torch fp32": "model.safetensors", "onnx fp32": "onnx/model.onnx",
              "onnx int8 per-channel": "onnx/model_qint8.onnx",
              "onnx int8 per-tensor": "onnx/model_qint8_per_tensor.onnx"}


@case("onnx", model=dict(help="model folder (default all-MiniLM-L6-v2)"),
      name=dict(default="all-MiniLM-L6-v2", help="its name in the JSON"),
      table=dict(action="store_true", help="print docs/performance.md's table from onnx.json"))
def onnx(args) -> None:
    """The ONNX export against torch: speed, file sizes, int8 quality; merged into onnx.json under --name."""
    path = common.RESULTS / "onnx.json"
    if args.table:
        return print(onnx_table(json.loads(path.read_text())))
    torch.set_num_threads(THREADS)
    models = json.loads(path.read_text())["models"] if path.exists() else {}
    entry = models.setdefault(args.name, {})
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
        pt = OnnxSentenceEncoder.load(folder, precision="int8", threads=THREADS)
        pt.graph, pt.fingerprint = open_graph(per_tensor, THREADS), pt.fingerprint + "-per-tensor"
        encoders = {"torch fp32": SentenceEncoder.load(folder, device="cpu"),
                    "onnx fp32": SentenceEncoder.load(folder, backend="onnx", threads=THREADS),
                    "onnx int8 per-channel": SentenceEncoder.load(folder, backend="onnx", precision="int8",
                                                                  threads=THREADS),
                    "onnx int8 per-tensor": pt}
        sentences = list(dict.fromkeys(D.load_stsb(DOWNSTREAM, "test").sentences()))
        entry["speed"] = {}
        for batch, n in ((1, 64), (64, 256)):  # 5 interleaved rounds of encode(first n sentences, batch_size)
            times = interleaved({name: (lambda e=e: e.encode(sentences[:n], batch_size=batch))
                                 for name, e in encoders.items()}, repeats=5)
            entry["speed"][f"batch_{batch}"] = {
                "sentences": n,
                "sentences_per_second": {k: round(n / summarise(v)["median"], 1) for k, v in times.items()},
                "speedup_vs_torch": {k: round(median_ratio(times["torch fp32"], v), 2)
                                     for k, v in times.items() if k != "torch fp32"}}
        entry["quality"] = onnx_quality(encoders, sentences)
        entry["quality_sentences"] = f"{len(sentences)} distinct STS-B test sentences"
    entry["updated"] = time.strftime("%Y-%m-%d %H:%M:%S")
    print(json.dumps(entry, indent=1))
    if not args.no_write:
        common.write_result("onnx_speed", {"code": common.code_version(), "threads": THREADS, "models": models},
                            path=path)


def onnx_quality(encoders: dict, sentences: list[str]) -> dict:
    """Each encoder's cosine to torch fp32 on ``sentences``, STS average, MQP test pair AP, SciFact test nDCG@10."""
    reference, out, domain = encoders["torch fp32"].encode(sentences), {}, common.SHARED / "data/domain"
    for name, enc in encoders.items():
        emb = enc.encode(sentences)
        cos = row_cosine(emb, reference)
        res = evaluate(enc, tasks="sts,retrieval,pairs", data_dir=DOWNSTREAM, retrieval_data=domain / "scifact",
                       pairs_data=domain / "medical-questions/pairs/test.tsv", verbose=False)
        out[name] = {"cosine_to_torch_fp32": {"min": round(float(cos.min()), 4), "mean": round(float(cos.mean()), 4)},
                     "max_abs_diff_to_torch_fp32": float(np.abs(emb - reference).max()),
                     "sts_avg": round(res["sts"]["avg"], 2), "mqp_test_pair_ap": round(res["pairs"]["test"]["ap"], 2),
                     "scifact_test_ndcg@10": round(res["retrieval"]["ndcg@10"], 2)}
    return out


def onnx_table(record: dict) -> str:
    """The markdown tables of docs/performance.md, one per model of onnx.json."""
    lines = []
    for model, e in ((m, e) for m, e in record["models"].items() if "speed" in e):
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


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m benchmarks.speed", description=__doc__.split("\n\n")[0])
    cases = top.add_subparsers(dest="case", required=True, metavar="CASE")
    for name, (fn, options) in CASES.items():
        sub = cases.add_parser(name, help=fn.__doc__, description=fn.__doc__)
        sub.add_argument("--results", type=Path, help="folder of the JSON (default benchmarks/results)")
        sub.add_argument("--no-write", action="store_true", help="write no JSON")
        for option, kw in options.items():
            sub.add_argument("--" + option.replace("_", "-"), **kw)
    return top


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.results:
        common.RESULTS = args.results
    CASES[args.case][0](args)


if __name__ == "__main__":
    main()
