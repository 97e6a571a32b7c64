"""Speed and memory of mixcse: the training step, big batches, large corpora, evaluation and inference.

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
from pathlib import Path
from typing import Callable

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
from mixcse.models.encoder import load_backbone
from mixcse.models.inference import open_encoder
from mixcse.models.onnx_backend import open_graph
from mixcse.training import trainer
from mixcse.training.config import TrainConfig, build_config
from mixcse.training.distributed import DistContext, init_from_env
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
    write_docs(args, "compiled_step")


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
    previous = common.RESULTS / "profile_step.json"  # its AdamW comparison (docs/archive.md) stays
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
    write_docs(args, "big_batch")


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


def timed_eval(model, tasks: str, **kw) -> tuple[dict, float]:
    t0 = time.perf_counter()
    res = evaluate(model, tasks=tasks, data_dir=DOWNSTREAM, verbose=False, **kw)
    wall = time.perf_counter() - t0
    print(f"{tasks} ({', '.join(f'{k}={v}' for k, v in kw.items() if k != 'cache_dir')}): {wall:.1f} s", flush=True)
    return res, wall


def scores(res: dict, part: str) -> dict:
    return {t: v["spearman" if part == "sts" else "acc"] for t, v in res.get(part, {}).items() if t != "avg"}


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
    write_docs(args, "streaming")


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


PATHS = {"torch fp32": "fp32", "torch bf16": "bf16", "onnx fp32": "fp32", "onnx fp32 fused": "fp32",
         "onnx int8": "int8", "onnx int8 fused": "int8"}  # every inference path -> its precision's ceiling
PAGE, SCALE = "docs/performance.md", "docs/scale.md"


def inference_paths(model: str, tmp: Path) -> tuple[dict, dict]:
    """Every inference path of ``model`` (its export in ``tmp``): torch fp32 and bf16 autocast; onnxruntime on
    the unfused graph, the fused one (`mixcse export`'s default) and int8 copies of each (the export writes the
    unfused one's). Returns ({path: encoder}, {path: its weights file})."""
    export_onnx(model, tmp / "fused", quantize="int8")
    export_onnx(model, tmp / "unfused", fuse=False)
    quantize_int8(tmp / "fused/onnx/model.onnx", tmp / "fused_qint8.onnx")
    files = {"torch fp32": tmp / "fused/model.safetensors", "onnx fp32": tmp / "unfused/onnx/model.onnx",
             "onnx fp32 fused": tmp / "fused/onnx/model.onnx", "onnx int8": tmp / "fused/onnx/model_qint8.onnx",
             "onnx int8 fused": tmp / "fused_qint8.onnx"}
    paths = {name: open_encoder(tmp / "fused", device="cpu", precision=name[-4:], threads=THREADS)
             for name in ("torch fp32", "torch bf16")}
    for name in ("onnx fp32", "onnx fp32 fused", "onnx int8", "onnx int8 fused"):
        paths[name] = open_encoder(tmp / "fused", backend="onnx", threads=THREADS)
        paths[name].graph = open_graph(files[name], THREADS)
    return paths, {**files, "torch bf16": files["torch fp32"]}


def gemm_ceilings(n: int, rounds: int, tmp: Path) -> dict:
    """GFLOP/s of an n x n x n matrix multiply on THREADS threads: torch fp32 and bf16, onnxruntime fp32 (MatMul)
    and int8 (the same MatMul after quantize_dynamic: DynamicQuantizeLinear + MatMulInteger)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    a, b = torch.randn(n, n), torch.randn(n, n)
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["y"])], "gemm",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])],
                              [numpy_helper.from_array(b.numpy(), "w")])
    onnx.save(helper.make_model(graph), tmp / "gemm.onnx")
    quantize_int8(tmp / "gemm.onnx", tmp / "gemm_int8.onnx")
    feed = {"a": a.numpy()}
    reps = 10 * max(1, 2048 // n) ** 3  # about a second a block: no runtime's idle threads reach the next block
    runs = {"torch fp32": lambda: a @ b, "torch bf16": (lambda x=a.bfloat16(), y=b.bfloat16(): x @ y),
            **{f"onnxruntime {k}": (lambda g=open_graph(tmp / f, THREADS): g.run(None, feed))
               for k, f in (("fp32", "gemm.onnx"), ("int8", "gemm_int8.onnx"))}}
    times = interleaved({k: (lambda f=f: [f() for _ in range(reps)]) for k, f in runs.items()}, repeats=rounds)
    return {k: 2 * n ** 3 * reps / summarise(v)["median"] / 1e9 for k, v in times.items()}


def encoder_flops(config, lengths: list[int]) -> float:
    """The useful FLOPs of a BERT-style encoder over sentences of ``lengths`` real tokens (padding excluded): per
    layer and token the linear layers' 2(4d² + 2d·ff), and attention's scores and weighted sum 4nd."""
    n = np.asarray(lengths, dtype=np.float64)
    d, ff = config.hidden_size, config.intermediate_size
    return float(config.num_hidden_layers * (n * 2 * (4 * d * d + 2 * d * ff) + 4 * n * n * d).sum())


def shares(times: dict[str, float]) -> dict[str, float]:
    """The largest entries of ``times`` as fractions of their sum."""
    return {k: v / sum(times.values()) for k, v in sorted(times.items(), key=lambda kv: -kv[1])[:6]}


def where_time_goes(paths: dict, fused_graph: Path, sentences: list[str], batch: int, tmp: Path) -> dict:
    """Torch fp32 and the fused onnx graph at ``batch``: tokenising + padding's share of torch's encode time,
    padding's share of the computed tokens, and each operator's share of the time (torch.profiler, self time;
    onnxruntime's profiler, kernel time)."""
    import onnxruntime as ort

    torch_path = paths["torch fp32"]
    t0 = time.perf_counter()
    ids = torch_path._tokenize(sentences)
    order = np.argsort([-len(x) for x in ids], kind="stable")
    padded = sum(torch_path._pad([ids[i] for i in order[s:s + batch]])[0].size for s in range(0, len(ids), batch))
    tokenise_s, t0 = time.perf_counter() - t0, time.perf_counter()
    torch_path.encode(sentences, batch_size=batch)
    out = {"tokenise_and_pad_share": tokenise_s / (time.perf_counter() - t0),
           "padding_share": 1 - sum(map(len, ids)) / padded}
    with torch.profiler.profile() as prof:
        torch_path.encode(sentences, batch_size=batch)
    out["torch fp32"] = shares({e.key: e.self_cpu_time_total for e in prof.key_averages()})
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.enable_profiling = THREADS, True
    options.profile_file_prefix = str(tmp / "ort")
    fused = paths["onnx fp32 fused"]
    fused.graph = ort.InferenceSession(str(fused_graph), options, providers=["CPUExecutionProvider"])
    fused.encode(sentences, batch_size=batch)
    ops: dict[str, float] = {}
    for event in json.loads(Path(fused.graph.end_profiling()).read_text()):
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            ops[event["args"]["op_name"]] = ops.get(event["args"]["op_name"], 0) + event["dur"]
    out["onnx fp32 fused"] = shares(ops)
    return out


@case("roofline", model=dict(help="model folder (default all-MiniLM-L6-v2)"), quick="2 rounds, fewer sentences")
def roofline(args) -> None:
    """Each inference path's useful GFLOP/s at batch 1 and 64 beside its precision's GEMM ceiling."""
    t0, rounds, gemm = time.perf_counter(), 2 if args.quick else 5, 1024 if args.quick else 2048
    torch.set_num_threads(THREADS)
    sentences = list(dict.fromkeys(D.load_stsb(DOWNSTREAM, "test").sentences()))
    with tempfile.TemporaryDirectory() as tmp:
        ceilings = gemm_ceilings(gemm, rounds, Path(tmp))
        best = {p: max(v for k, v in ceilings.items() if k.endswith(p)) for p in ("fp32", "bf16", "int8")}
        paths, files = inference_paths(args.model or common.minilm_path(), Path(tmp))
        config, batches = paths["torch fp32"].encoder.backbone.config, {}
        for batch, n in ((1, 32 if args.quick else 128), (64, 256 if args.quick else 1024)):
            lengths = list(map(len, paths["torch fp32"]._tokenize(sentences[:n])))
            flops = encoder_flops(config, lengths)
            times = interleaved({k: (lambda e=e: e.encode(sentences[:n], batch_size=batch)) for k, e in paths.items()},
                                repeats=rounds)
            rows = {}
            for k, v in times.items():
                sec = summarise(v)
                rows[k] = {"precision": PATHS[k], "seconds": sec, "sentences_per_s": n / sec["median"],
                           "tokens_per_s": sum(lengths) / sec["median"], "gflops": flops / sec["median"] / 1e9,
                           "fraction_of_ceiling": flops / sec["median"] / 1e9 / best[PATHS[k]],
                           "vs_torch_fp32": median_ratio(times["torch fp32"], v)}
            batches[str(batch)] = {"sentences": n, "real_tokens": sum(lengths), "useful_gflop": flops / 1e9,
                                   "paths": rows}
        where = where_time_goes(paths, files["onnx fp32 fused"], sentences[:batches["64"]["sentences"]], 64,
                                Path(tmp))
    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    save(args, "roofline", {
        "model": args.model or "all-MiniLM-L6-v2", "threads": THREADS, "rounds": rounds, "gemm_size": gemm,
        "code": common.code_version(), "isa": {f: f in flags for f in ("avx512f", "avx512_vnni", "avx512_bf16",
                                                                          "amx_bf16", "amx_int8")},
        "gemm_gflops": ceilings, "ceiling_gflops": best, "batches": batches, "where_time_goes_batch_64": where,
        "wall_s": time.perf_counter() - t0})
    write_docs(args, "roofline")


@case("onnx", model=dict(help="model folder (default all-MiniLM-L6-v2)"))
def onnx(args) -> None:
    """Each inference path's file size and agreement with torch fp32: cosine, STS, MQP pair AP, SciFact."""
    torch.set_num_threads(THREADS)
    sentences, out = list(dict.fromkeys(D.load_stsb(DOWNSTREAM, "test").sentences())), {}
    domain = common.SHARED / "data/domain"
    with tempfile.TemporaryDirectory() as tmp:
        paths, files = inference_paths(args.model or common.minilm_path(), Path(tmp))
        reference = paths["torch fp32"].encode(sentences)
        for name, enc in paths.items():
            emb = enc.encode(sentences)
            cos = row_cosine(emb, reference)
            res = evaluate(enc, tasks="sts,retrieval,pairs", data_dir=DOWNSTREAM, retrieval_data=domain / "scifact",
                           pairs_data=domain / "medical-questions/pairs/test.tsv", verbose=False)
            out[name] = {"file_mb": files[name].stat().st_size / 1e6, "max_abs_diff_to_torch_fp32":
                         float(np.abs(emb - reference).max()), "cosine_to_torch_fp32": {
                             "min": float(cos.min()), "mean": float(cos.mean())}, "sts_avg": res["sts"]["avg"],
                         "mqp_test_pair_ap": res["pairs"]["test"]["ap"], "scifact_test_ndcg@10":
                         res["retrieval"]["ndcg@10"]}
            print(name, json.dumps(out[name]), flush=True)
    save(args, "onnx", {"model": args.model or "all-MiniLM-L6-v2", "threads": THREADS, "code": common.code_version(),
                        "cosine_sentences": f"{len(sentences)} distinct STS-B test sentences", "paths": out})
    write_docs(args, "onnx")


@case("bf16-eval", precision=dict(choices=["fp32", "bf16"], help="one precision (merged into the JSON)"),
      quick="STS12, STS-B and TREC only")
def bf16_eval(args) -> None:
    """The full evaluation of all-MiniLM-L6-v2 in fp32 and in bf16 autocast: time, every score, pair AP, cosine."""
    path, model = common.RESULTS / "bf16_eval.json", common.minilm_path()
    torch.set_num_threads(THREADS)
    old = json.loads(path.read_text()) if path.exists() and args.precision else {}
    runs = old.get("runs", {}) if old.get("machine", {}).get("cpu") == common.cpu_model() else {}
    pairs = {n: common.SHARED / f"data/domain/{n}/pairs/test.tsv" for n in ("medical-questions", "products")}
    sentences = list(dict.fromkeys(D.load_stsb(DOWNSTREAM, "test").sentences()))
    for precision in [args.precision] if args.precision else ["fp32", "bf16"]:
        res, wall = timed_eval(model, "STS12,STSBenchmark,TREC" if args.quick else "all", workers=2,
                               precision=precision)
        ap = evaluate(model, tasks="pairs", pairs_data=list(pairs.values()), precision=precision, verbose=False)
        runs[precision] = {**eval_side(res, wall), "sts_avg": res["sts"]["avg"],
                           "pair_ap": {n: r["ap"] for n, r in zip(pairs, ap["pairs"].values())}}
    emb = {p: open_encoder(model, device="cpu", precision=p).encode(sentences) for p in ("fp32", "bf16")}
    cos = row_cosine(emb["bf16"], emb["fp32"])
    save(args, "bf16_eval", {"model": "all-MiniLM-L6-v2", "threads": THREADS, "workers": 2, "code":
                             common.code_version(), "cosine_bf16_to_fp32": {"min": float(cos.min()), "mean": float(
                                 cos.mean()), "sentences": len(sentences)}, "runs": runs})
    if {"fp32", "bf16"} <= set(runs):
        write_docs(args, "bf16_eval")


def caption(record: dict, command: str) -> str:
    """Where a speed table comes from: command, file, machine, threads, torch, date and code commit."""
    m, code = record["machine"], record.get("code") or record.get("commit")
    return (f"`python -m benchmarks.speed {command}` (`benchmarks/results/{record['benchmark']}.json`): {m['cpu']}, "
            f"{m['logical_cpus']} vCPUs, {m['torch_threads']} threads, torch {m['torch']}, {record['date'][:10]}, "
            + (f"commit {code}" if code else record["provenance"]))


def render_roofline(record: dict) -> str:
    """The roofline block of docs/performance.md: machine, ceilings, a row per path and batch size, where it goes."""
    g, c, b = record["gemm_gflops"], record["ceiling_gflops"], record["batches"]
    isa, w = ", ".join(k for k, v in record["isa"].items() if v), record["where_time_goes_batch_64"]
    rows = [caption(record, "roofline") + f"; {record['model']}; {isa}. Ceilings, a {record['gemm_size']}³ matrix "
            f"multiply: fp32 {c['fp32']:.0f} GFLOP/s (torch {g['torch fp32']:.0f}, onnxruntime "
            f"{g['onnxruntime fp32']:.0f}), bf16 {c['bf16']:.0f} (torch), int8 {c['int8']:.0f} (onnxruntime's "
            f"quantised MatMul). The STS-B test sentences: {b['1']['sentences']} one at a time "
            f"({b['1']['real_tokens']:,} real tokens) and {b['64']['sentences']:,} in length-sorted batches of 64 "
            f"({b['64']['real_tokens']:,} real tokens); useful FLOPs: the linear layers and attention over real tokens;"
            f" the paths alternate in {record['rounds']} rounds (median; ± half the per-round IQR, relative).", "",
            "| path | batch | sentences/s | tokens/s | useful GFLOP/s | ceiling | of the ceiling | × torch fp32 | ± |",
            "|---|---|---|---|---|---|---|---|---|"]
    for batch, runs in b.items():
        for name, r in runs["paths"].items():
            t = r["seconds"]
            rows.append(f"| {name} | {batch} | {r['sentences_per_s']:,.1f} | {r['tokens_per_s']:,.0f} | "
                        f"{r['gflops']:.1f} | {c[r['precision']]:.0f} ({r['precision']}) | "
                        f"{100 * r['fraction_of_ceiling']:.0f} % | {r['vs_torch_fp32']:.2f}× | "
                        f"{50 * (t['q3'] - t['q1']) / t['median']:.0f} % |")
    ops = {k: ", ".join(f"{op} {100 * v:.0f} %" for op, v in w[k].items()) for k in ("torch fp32", "onnx fp32 fused")}
    return "\n".join(rows + ["", f"Where the time goes at batch 64: tokenising and padding take "
                             f"{100 * w['tokenise_and_pad_share']:.1f} % of torch fp32's encode time, and padding is "
                             f"{100 * w['padding_share']:.1f} % of the tokens computed. Operator shares, torch fp32: "
                             f"{ops['torch fp32']}; the fused onnx graph: {ops['onnx fp32 fused']}."])


def render_onnx(record: dict) -> str:
    rows = [caption(record, "onnx") + f"; {record['model']}; cosine over {record['cosine_sentences']}.", "",
            "| path | file MB | cosine to torch fp32 min / mean | largest abs. difference | STS avg | MQP test pair AP "
            "| SciFact nDCG@10 |", "|---|---|---|---|---|---|---|"]
    for name, q in record["paths"].items():
        c = q["cosine_to_torch_fp32"]
        rows.append(f"| {name} | {q['file_mb']:.1f} | {c['min']:.4f} / {c['mean']:.4f} | "
                    f"{q['max_abs_diff_to_torch_fp32']:.1e} | {q['sts_avg']:.2f} | {q['mqp_test_pair_ap']:.2f} | "
                    f"{q['scifact_test_ndcg@10']:.2f} |")
    return "\n".join(rows)


def render_bf16(record: dict) -> str:
    (fp, bf), cos = (record["runs"][p] for p in ("fp32", "bf16")), record["cosine_bf16_to_fp32"]
    rows = [caption(record, "bf16-eval") + f"; {record['model']}, `--workers {record['workers']}`; one run per "
            "precision. Cosine of bf16 to fp32 embeddings over "
            f"{cos['sentences']:,} STS-B test sentences: min {cos['min']:.4f}, mean {cos['mean']:.4f}.", "",
            "| | fp32 | bf16 | bf16 − fp32 (or fp32 / bf16 time) |", "|---|---|---|---|",
            f"| wall time, whole evaluation | {fp['wall_seconds']:.0f} s | {bf['wall_seconds']:.0f} s | "
            f"{fp['wall_seconds'] / bf['wall_seconds']:.2f}× |"]
    for phase in ("encode", "transfer"):
        a, b = fp["phases_seconds"][phase], bf["phases_seconds"][phase]
        rows.append(f"| {phase} | {a:.0f} s | {b:.0f} s | {a / b:.2f}× |")
    scores = [("STS avg", fp["sts_avg"], bf["sts_avg"])] + [(t, fp["sts"][t], bf["sts"][t]) for t in fp["sts"]]
    scores += [(t, fp["acc"][t], bf["acc"][t]) for t in fp["acc"]]
    scores += [(f"pair AP, {n} test", fp["pair_ap"][n], bf["pair_ap"][n]) for n in fp["pair_ap"]]
    rows += [f"| {name} | {a:.2f} | {b:.2f} | {b - a:+.2f} |" for name, a, b in scores]
    return "\n".join(rows)


STEP_NAMES = {"onepass_mixcse": "one-pass MixCSE", "cached_mixcse": "cached MixCSE", "cached_simcse": "cached SimCSE",
              "st_cached_simcse": "sentence-transformers' CachedMultipleNegativesRankingLoss (SimCSE)"}


def render_big_batch(record: dict) -> str:
    """docs/scale.md: peak memory against the batch size, then the four steps side by side at one batch size."""
    s, sweep, k = record["side_by_side"], record["sweep"], record["setting"]["mini_batch_size"]
    sizes = sorted({r["batch"] for rows in sweep.values() for r in rows})
    rows = [caption(record, "big-batch") + f"; the stand-in, {record['setting']['pooler']}, length "
            f"{record['setting']['max_seq_length']}, K = {k}; peak = torch's CPU allocator above the weights and "
            "AdamW state.", "", "| batch N | " + " | ".join(map(str, sizes)) + " |", "|---" * (len(sizes) + 1) + "|"]
    for name, label in (("onepass_mixcse", "one-pass step"), ("cached_mixcse", f"cached step (K = {k})")):
        peak = {r["batch"]: f"{r['peak_mb']:,.0f}" for r in sweep[name]}
        rows.append(f"| {label}, peak MB | " + " | ".join(peak.get(n, "–") for n in sizes) + " |")
    one, n = s["onepass_mixcse"]["sentences_per_s"], record["time_ratio_measured_at_batch"]
    rows += ["", f"At N = {n}, {record['setting']['rounds']} interleaved rounds:", "", "| step | seconds, median "
             "(min–max) | sentences/s | × one-pass MixCSE | peak MB |", "|---|---|---|---|---|"] + [
        f"| {STEP_NAMES[k]} | {v['step_s']['median']:.2f} ({v['step_s']['min']:.2f}–{v['step_s']['max']:.2f}) | "
        f"{v['sentences_per_s']:.1f} | {v['sentences_per_s'] / one:.2f}× | {v['peak_mb']:,.0f} |" for k, v in s.items()]
    return "\n".join(rows)


def render_streaming(record: dict) -> str:
    t, load = record["setting"], record["machine"]["load_average_1_5_15min_at_start"][0]
    rows = [caption(record, "disk-corpus") + f"; the stand-in's tokenizer, length {t['max_seq_length']}, then "
            f"{t['train_steps']} training steps of batch {t['batch_size']}; load average at the start {load:.1f}.",
            "", "| sentences | peak RSS, `corpus: disk` (build + reopen + train) | tokenisation (2 workers) | reopening"
            " the cached entry | tokeniser worker peak | peak RSS, `corpus: memory` |", "|---|---|---|---|---|---|"]
    first = record["rows"]["0p4m"]["disk"]["peak_rss_mb"]
    return "\n".join(rows + [
        f"| {r['sentences'] / 1e6:.1f}M | {d['peak_rss_mb']:,.0f} MB ({d['peak_rss_mb'] / first:.2f}×) | "
        f"{d['tokenise_sentences_per_second']:,.0f} sentences/s ({d['build_s']:,.0f} s) | {d['reopen_s']:.2f} s | "
        f"{d['workers_peak_rss_mb']:,.0f} MB | {mem} |" for r in record["rows"].values() for d, mem in
        [(r["disk"], f"{r['memory']['peak_rss_mb']:,.0f} MB" if "memory" in r else "not run")]])


def render_compiled(record: dict) -> str:
    e, c, r = record["eager_step_s"], record["compiled_step_s"], record["compiled_over_eager"]
    return (caption(record, "compiled") + f"; the stand-in, batch {record['setting']['batch']}, length "
            f"{record['setting']['max_seq_length']}, {record['setting']['rounds']} interleaved rounds: compiling took "
            f"{record['compile_seconds']:.0f} s (the first call); the compiled step {c['median']:.3f} s against the "
            f"eager {e['median']:.3f} s, compiled / eager {r['median']:.2f}× (per-round IQR {r['q1']:.2f}–"
            f"{r['q3']:.2f}).")


BLOCKS = {name: (page, lambda name=name, fn=fn: fn(json.loads((common.RESULTS / f"{name}.json").read_text())))
          for name, page, fn in (("roofline", PAGE, render_roofline), ("onnx", PAGE, render_onnx),
                                 ("bf16_eval", PAGE, render_bf16), ("big_batch", SCALE, render_big_batch),
                                 ("streaming", SCALE, render_streaming), ("compiled_step", SCALE, render_compiled))}


def write_docs(args, block: str) -> None:
    """The block of the docs page that ``block``'s committed JSON makes (not after --no-write, --results, --quick)."""
    if not (args.no_write or args.results or getattr(args, "quick", False)):
        common.write_block(common.REPO / BLOCKS[block][0], BLOCKS[block][1](), *common.block_markers(block))


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
