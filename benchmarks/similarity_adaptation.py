"""Similarity adaptation on duplicate patient questions: all-MiniLM-L6-v2 adapted on unlabeled in-domain questions.

Every row starts from all-MiniLM-L6-v2, trains on the same texts (../shared/data/domain/medical-questions/
unlabeled.txt) for the same steps and batch, picks its checkpoint the same way (dev-pair AP every `eval_steps`, the
start model a candidate), and is scored the same way: MQP dev / test pair AP, RQE test AP, STS-B test Spearman.
mixcse's objectives run through `mixcse.train`; the field's baselines through sentence-transformers' own trainer
and losses: TSDAE (DenoisingAutoEncoderLoss), CT (ContrastiveTensionLossInBatchNegatives), SimCSE as
MultipleNegativesRankingLoss (and with its stop-gradient hardness weighting, `mnrl-hard`).

    python benchmarks/similarity_adaptation.py compare --seeds 0 1 2      # the table: every method x seed
    python benchmarks/similarity_adaptation.py sweep --method mixcse --grid learning_rate=5e-6,1e-5,3e-5
    python benchmarks/similarity_adaptation.py report                     # table + figure from the JSON

Runs are keyed by method, settings and seed; a finished key is never run again (resumable), so a killed run is
continued by the same command. Results: benchmarks/results/similarity_adaptation.json.
"""
from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import common

DATA = common.SHARED / "data" / "domain" / "medical-questions"
PAIRS = {"mqp_dev": DATA / "pairs" / "dev.tsv", "mqp_test": DATA / "pairs" / "test.tsv",
         "rqe_test": DATA / "rqe-test.tsv"}
RESULTS = common.RESULTS / "similarity_adaptation.json"
MIXCSE_METHODS = ("simcse", "mixcse", "mixcse-single", "mixcse-wo-sg")
ST_METHODS = ("tsdae", "ct", "mnrl", "mnrl-hard")
METHODS = MIXCSE_METHODS + ST_METHODS
# the shared recipe of every row (mixcse config keys; the sentence-transformers rows map them onto their trainer)
DEFAULTS = {"max_steps": 200, "batch_size": 64, "learning_rate": 1e-5, "max_seq_length": 32, "temperature": 0.05,
            "eval_steps": 50}


def settings_key(settings: dict) -> str:
    return ",".join(f"{k}={settings[k]}" for k in sorted(settings) if DEFAULTS.get(k) != settings[k]) or "recipe"


def run_key(method: str, settings: dict, seed: int) -> str:
    return f"{method}|{settings_key(settings)}|seed{seed}"


# ------------------------------------------------------------------------------------------------ scoring
def score_model(model_dir: str | Path, device: str | None = None) -> dict:
    """MQP dev / test AP, RQE test AP (x100) and STS-B test Spearman x100 of the model in ``model_dir``."""
    from mixcse import SentenceEncoder
    from mixcse.evaluation import senteval as D
    from mixcse.evaluation import sts as S
    from mixcse.evaluation.pairs import evaluate_pairs

    encoder = SentenceEncoder.load(model_dir, device=device)
    pairs = evaluate_pairs(encoder, list(PAIRS.values()), batch_size=128)
    out = {f"{name}_ap": r["ap"] for name, r in zip(PAIRS, pairs.values())}
    stsb = D.load_stsb(common.DOWNSTREAM, "test")
    emb = encoder.encode(stsb.a + stsb.b, batch_size=128)
    out["stsb_test"] = S.score_pairs(emb[:len(stsb.a)], emb[len(stsb.a):], stsb.scores)["spearman"]
    return out


@functools.cache
def dev_pairs():
    from mixcse.evaluation.pairs import read_pairs

    return read_pairs(PAIRS["mqp_dev"])


def dev_ap(encode) -> float:
    """Dev-pair AP x100 with any ``encode(list[str]) -> array`` (the selection metric of every row)."""
    from mixcse.evaluation.pairs import score_pair_sets

    (result,) = score_pair_sets(encode, [dev_pairs()]).values()
    return result["ap"]


# ------------------------------------------------------------------------------------------------ one run
def train_mixcse(method: str, settings: dict, seed: int, out: Path) -> Path:
    import mixcse

    config = {"model": common.minilm_path(), "train_file": str(DATA / "unlabeled.txt"), "segment": "line",
              "output_dir": str(out), "loss": method, "pooler": "avg", "select_on": "pairs",
              "select_data": str(PAIRS["mqp_dev"]), "precision": "auto", "seed": seed, **settings}
    mixcse.train(config, progress=False)
    return out / "best"


def _noisy(text: str, rng: random.Random, deletion: float = 0.6) -> str:
    """TSDAE's input noise: delete each word with probability 0.6, keep at least one (words split on spaces)."""
    words = text.split()
    kept = [w for w in words if rng.random() > deletion]
    return " ".join(kept or [rng.choice(words)]) if words else text


def train_sentence_transformers(method: str, settings: dict, seed: int, out: Path) -> Path:
    """The baseline through sentence-transformers' own trainer and loss, the same steps, batch, learning rate,
    length and checkpoint selection as the mixcse rows."""
    import torch
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, losses
    from sentence_transformers.sentence_transformer.training_args import SentenceTransformerTrainingArguments
    from transformers import TrainerCallback, set_seed

    set_seed(seed)
    texts = [t.strip() for t in (DATA / "unlabeled.txt").read_text(encoding="utf-8").splitlines() if t.strip()]
    model = SentenceTransformer(common.minilm_path(), device="cuda" if torch.cuda.is_available() else "cpu")
    inference_length, scale = model.max_seq_length, 1.0 / settings["temperature"]
    if method == "tsdae":
        rng = random.Random(seed)
        data = Dataset.from_dict({"noisy": [_noisy(t, rng) for t in texts], "text": texts})
        loss = losses.DenoisingAutoEncoderLoss(model, decoder_name_or_path=common.minilm_path(),
                                               tie_encoder_decoder=True)
    elif method == "ct":
        data = Dataset.from_dict({"text": texts})
        loss = losses.ContrastiveTensionLossInBatchNegatives(model, scale=scale)
    else:
        data = Dataset.from_dict({"anchor": texts, "positive": texts})
        hard = {"hardness_mode": "in_batch_negatives", "hardness_strength": 9.0} if method == "mnrl-hard" else {}
        loss = losses.MultipleNegativesRankingLoss(model, scale=scale, **hard)

    def encode(sentences):
        model.eval()
        try:
            return model.encode(sentences, batch_size=128, normalize_embeddings=True, convert_to_numpy=True)
        finally:
            model.max_seq_length = settings["max_seq_length"]
            model.train()

    best = {"ap": -1.0, "state": None, "step": None}

    def select(step: int) -> None:
        model.max_seq_length = inference_length  # judged as it is used, as mixcse's selection does
        ap = dev_ap(encode)
        if ap > best["ap"]:
            best.update(ap=ap, step=step, state={k: v.detach().to("cpu", copy=True)
                                                 for k, v in model.state_dict().items()})

    class Select(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % settings["eval_steps"] == 0 or state.global_step == settings["max_steps"]:
                select(state.global_step)

    select(0)
    model.max_seq_length = settings["max_seq_length"]
    bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out / "trainer"), max_steps=settings["max_steps"],
        per_device_train_batch_size=settings["batch_size"], learning_rate=settings["learning_rate"],
        warmup_steps=0, lr_scheduler_type="linear", weight_decay=0.0, max_grad_norm=1.0, seed=seed, bf16=bf16,
        save_strategy="no", eval_strategy="no", logging_steps=50, report_to="none", disable_tqdm=True,
        dataloader_drop_last=True)
    SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss, callbacks=[Select()]).train()
    model.load_state_dict(best["state"])
    model.max_seq_length = inference_length
    model.save(str(out / "best"))
    (out / "selection.json").write_text(json.dumps({"best_step": best["step"], "best_dev": best["ap"]}))
    return out / "best"


def run_one(method: str, settings: dict, seed: int) -> dict:
    """Train one row in a fresh temporary folder, score it, and return its record."""
    import torch

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="simadapt-") as tmp:
        train = train_mixcse if method in MIXCSE_METHODS else train_sentence_transformers
        best = train(method, settings, seed, Path(tmp) / "run")
        seconds = time.perf_counter() - t0
        scores = score_model(best)
        summary = Path(tmp) / "run" / ("summary.json" if method in MIXCSE_METHODS else "selection.json")
        selected = json.loads(summary.read_text())["best_step"]
    record = {"method": method, "seed": seed, "settings": dict(settings), "key": run_key(method, settings, seed),
              **scores, "best_step": selected, "seconds": round(seconds, 1),
              "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if torch.cuda.is_available():
        record["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    record["machine"] = machine_label()
    return record


def machine_label() -> str:
    """Where a row ran: the GPU (bf16 autocast) or the CPU (fp32 unless it has native bf16)."""
    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)}, bf16 autocast"
    from mixcse.training.trainer import cpu_supports_bf16

    return f"{common.cpu_model()} ({os.cpu_count()} vCPU), {'bf16 autocast' if cpu_supports_bf16() else 'fp32'}"


def run_isolated(method: str, settings: dict, seed: int, in_process: bool = False) -> dict:
    """``run_one`` in a spawned process: its own peak RSS, no state carried between rows. ``in_process`` saves the
    process start (seconds a row on a GPU); then peak RSS is the whole process's and is not recorded."""
    import multiprocessing

    if in_process:
        import torch

        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        return {**run_one(method, settings, seed), "peak_rss_mb": None}

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(run_one, (method, settings, seed))


# ------------------------------------------------------------------------------------------------ results file
def load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {"zero_shot": None, "runs": [], "sweep": []}


def save(path: Path, results: dict) -> None:
    machines = results.setdefault("machines", [])
    here = common.machine_info()
    if not any(m.get("gpu") == here.get("gpu") and m.get("cpu") == here.get("cpu") for m in machines):
        machines.append(here)
    results.update(benchmark="similarity_adaptation", command=" ".join(["python"] + sys.argv), recipe=DEFAULTS,
                   date=time.strftime("%Y-%m-%d %H:%M:%S"), code=common.code_version())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(common.json_safe(results), indent=2) + "\n")
    tmp.replace(path)


def execute(path: Path, todo: list[tuple[str, dict, int]], section: str, in_process: bool = False) -> dict:
    results = load(path)
    if results.get("zero_shot") is None:
        results["zero_shot"] = score_model(common.minilm_path())
        save(path, results)
        print("zero-shot", json.dumps(results["zero_shot"]), flush=True)
    for method, settings, seed in todo:
        key = run_key(method, settings, seed)
        if any(r["key"] == key for r in results[section]):
            continue
        record = run_isolated(method, settings, seed, in_process)
        results[section].append(record)
        save(path, results)
        print(json.dumps(record), flush=True)
    return results


# ------------------------------------------------------------------------------------------------ report
def summary_rows(results: dict) -> list[dict]:
    from scipy import stats

    by_method: dict[str, list[dict]] = {}
    for r in results["runs"]:
        by_method.setdefault(r["method"], []).append(r)
    rows = []
    for method in [m for m in METHODS if m in by_method]:
        runs = sorted(by_method[method], key=lambda r: r["seed"])
        row = {"method": method, "seeds": len(runs)}
        for metric in ("mqp_dev_ap", "mqp_test_ap", "rqe_test_ap", "stsb_test", "seconds", "peak_rss_mb",
                       "peak_gpu_mb"):
            values = np.asarray([r[metric] for r in runs if r.get(metric) is not None], dtype=float)
            row[metric] = (float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else 0.0) \
                if len(values) else None
        for metric in ("seconds", "peak_rss_mb", "peak_gpu_mb"):  # costs differ by machine: kept apart
            by_machine: dict[str, list[float]] = {}
            for r in runs:
                if r.get(metric) is not None:
                    by_machine.setdefault(short_machine(r.get("machine", "?")), []).append(r[metric])
            row[f"{metric}_by_machine"] = {m: float(np.mean(v)) for m, v in by_machine.items()}
        row["test_above_zero_shot"] = sum(r["mqp_test_ap"] > results["zero_shot"]["mqp_test_ap"] for r in runs)
        for other in ("simcse", "tsdae"):
            if other == method or other not in by_method:
                continue
            paired = {r["seed"]: r["mqp_test_ap"] for r in by_method[other]}
            seeds = [r["seed"] for r in runs if r["seed"] in paired]
            if len(seeds) >= 2:
                a = [next(r["mqp_test_ap"] for r in runs if r["seed"] == s) for s in seeds]
                b = [paired[s] for s in seeds]
                row[f"vs_{other}"] = {"diff": float(np.mean(np.subtract(a, b))),
                                      "p": float(stats.ttest_rel(a, b).pvalue), "seeds": len(seeds)}
        rows.append(row)
    return rows


def short_machine(label: str) -> str:
    return "GPU" if "NVIDIA" in label or "GPU" in label else "CPU"


def cost(row: dict) -> tuple[str, str]:
    """Mean seconds a run and mean peak memory, per kind of machine (GPU rows: GPU memory; CPU rows: RSS)."""
    seconds = ", ".join(f"{v:.0f} ({m})" for m, v in sorted(row["seconds_by_machine"].items()))
    memory = [f"{v:.0f} (GPU)" for v in row["peak_gpu_mb_by_machine"].values()] + \
        [f"{v:.0f} (CPU RSS)" for v in row["peak_rss_mb_by_machine"].values()]
    return seconds or "–", ", ".join(memory) or "–"


def render(results: dict) -> str:
    zs = results["zero_shot"]
    rows = summary_rows(results)
    fmt = lambda ms: f"{ms[0]:.2f} ± {ms[1]:.2f}"  # noqa: E731
    rows = [r for r in rows if r["seeds"]]
    lines = ["| method | seeds | MQP dev AP | MQP test AP | RQE test AP | STS-B test | seconds a run | peak memory MB | "
             "seeds above zero-shot (test) | test vs SimCSE | test vs TSDAE |",
             "|---|---|---|---|---|---|---|---|---|---|---|",
             f"| zero-shot | – | {zs['mqp_dev_ap']:.2f} | {zs['mqp_test_ap']:.2f} | {zs['rqe_test_ap']:.2f} | "
             f"{zs['stsb_test']:.2f} | – | – | – | – | – |"]
    for row in rows:
        vs = [f"{row[k]['diff']:+.2f} (p = {row[k]['p']:.2g})" if k in row else "–" for k in ("vs_simcse", "vs_tsdae")]
        lines.append(f"| {row['method']} | {row['seeds']} | {fmt(row['mqp_dev_ap'])} | {fmt(row['mqp_test_ap'])} | "
                     f"{fmt(row['rqe_test_ap'])} | {fmt(row['stsb_test'])} | {cost(row)[0]} | {cost(row)[1]} | "
                     f"{row['test_above_zero_shot']}/{row['seeds']} | {vs[0]} | {vs[1]} |")
    return "\n".join(lines)


def render_sweep(results: dict) -> str:
    lines = ["| method | settings | seed | MQP dev AP | MQP test AP | RQE test AP | STS-B test | best step |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sorted(results.get("sweep", []), key=lambda r: (r["method"], r["key"])):
        lines.append(f"| {r['method']} | {settings_key(r['settings'])} | {r['seed']} | {r['mqp_dev_ap']:.2f} | "
                     f"{r['mqp_test_ap']:.2f} | {r['rqe_test_ap']:.2f} | {r['stsb_test']:.2f} | {r['best_step']} |")
    return "\n".join(lines)


def figure(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = summary_rows(results)
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for i, row in enumerate(rows):
        values = [r["mqp_test_ap"] for r in results["runs"] if r["method"] == row["method"]]
        ax.bar(i, row["mqp_test_ap"][0], color="#4c72b0" if row["method"].startswith(("mixcse", "simcse"))
               else "#999999")
        ax.plot([i] * len(values), values, "k.", ms=4)
    ax.axhline(results["zero_shot"]["mqp_test_ap"], color="#c44e52", ls="--", label="zero-shot")
    ax.set_xticks(range(len(rows)), [r["method"] for r in rows], rotation=20)
    low = min(min(r["mqp_test_ap"] for r in results["runs"]), results["zero_shot"]["mqp_test_ap"])
    ax.set_ylim(low - 0.5, None)
    ax.set_ylabel("MQP test AP (x100)")
    ax.set_title("all-MiniLM-L6-v2 adapted on unlabeled patient questions (bars: mean; dots: seeds)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def write_report(results: dict, docs: Path) -> None:
    text = ["<!-- generated by benchmarks/similarity_adaptation.py report from "
            "benchmarks/results/similarity_adaptation.json; do not edit -->", "",
            "# Similarity adaptation: the measured table", "",
            "Machines: " + "; ".join(sorted({r.get("machine", "?") for r in results["runs"] + results["sweep"]}))
            + " (each row's `machine` in the JSON). The table's recipe: "
            + "; ".join(", ".join(f"{k} {v}" for k, v in settings.items())
                        for settings in {json.dumps(r["settings"], sort_keys=True): r["settings"]
                                         for r in results["runs"]}.values()) + ".", "", render(results), ""]
    if results.get("sweep"):
        text += ["## Exploration (single seeds)", "", "One setting changed at a time from: "
                 + ", ".join(f"{k} {v}" for k, v in results["recipe"].items()) + ".", "", render_sweep(results), ""]
    (docs / "similarity_adaptation_results.md").write_text("\n".join(text))
    if results["runs"]:
        figure(results, docs / "similarity_adaptation.png")


# ------------------------------------------------------------------------------------------------ CLI
def parse_grid(items: list[str]) -> list[dict]:
    keys, values = [], []
    for item in items:
        key, _, raw = item.partition("=")
        keys.append(key)
        values.append([json.loads(v) if v[:1].isdigit() or v[:1] in "-[" else v for v in raw.split(",")])
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)] or [{}]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("compare", "sweep", "report"))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="recipe changes for every row (compare) or the base of the grid (sweep)")
    parser.add_argument("--grid", nargs="*", default=[], metavar="KEY=V1,V2", help="sweep: the values to try")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--in-process", action="store_true", help="no process per row (no peak RSS): GPU machines")
    parser.add_argument("--best-of-sweep", action="store_true",
                        help="compare: take the recipe changes of the sweep's best MQP dev AP (selection on dev)")
    parser.add_argument("--docs", type=Path, default=common.REPO / "docs")
    args = parser.parse_args(argv)
    base = {**DEFAULTS, **parse_grid(args.set)[0]}
    if args.action == "report":
        results = load(args.results)
        print(render(results))
        write_report(results, args.docs)
        return 0
    if args.action == "compare":
        if args.best_of_sweep:
            sweep = [r for r in load(args.results).get("sweep", []) if r["method"] == "mixcse"]
            if sweep:
                base = max(sweep, key=lambda r: r["mqp_dev_ap"])["settings"]
                print(f"recipe from the sweep's best dev AP: {settings_key(base)}", flush=True)
        todo = [(m, base, s) for s in args.seeds for m in args.methods]
        results = execute(args.results, todo, "runs", args.in_process)
        print(render(results))
    else:
        todo = [(m, {**base, **g}, s) for g in parse_grid(args.grid) for m in args.methods for s in args.seeds]
        results = execute(args.results, todo, "sweep", args.in_process)
        print(render_sweep(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
