"""Domain adaptation of all-MiniLM-L6-v2 on two short-text domains: mixcse's methods and levers against
sentence-transformers' own trainers, and the main job timed.

    python -m benchmarks.domain similarity --domain products --methods mixcse --seeds 0 --grid learning_rate=1e-5,3e-5
    python -m benchmarks.domain similarity --domain products --seeds 0 1 2     # every method x seed
    python -m benchmarks.domain similarity --domain medical --methods mixcse --set false_negative_threshold=0.9
    python -m benchmarks.domain similarity --report-only    # the tables and figure from the JSON
    python -m benchmarks.domain main-job                  # then --no-bf16: the run of a CPU without bf16
    python -m benchmarks.domain label-budget              # selection on 25 ... all dev pairs, the recipes' runs
    python -m benchmarks.domain similarity --domain products --methods mixcse simcse --seeds 0 --set model=mpnet
    python -m benchmarks.domain rescore                   # dev-threshold F1 for recorded runs whose model is cached

Domains: product-offer titles (WDC; select on dev pairs, report test AP) and patient questions (MQP; the same, and
MEDIQA RQE as an outside check). Every run is scored on both domains' pairs, RQE and STS-B test. Outputs:
benchmarks/results/{similarity_adaptation,main_job}.json and the generated blocks (BLOCKS). The results JSON is the
run cache: a recorded run is never trained again, each finished run is written at once, and a mixcse run cut off
mid-training continues from its checkpoint in benchmarks/cache/domain/ (mixcse's resume is exact).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import common

CACHE, DOCS = common.REPO / "benchmarks" / "cache" / "domain", common.REPO / "docs"
DATA = common.SHARED / "data" / "domain"
DOMAINS = {"products": {"train": "products/unlabeled.txt", "dev": "products_dev", "test": "products_test"},
           "medical": {"train": "medical-questions/unlabeled.txt", "dev": "mqp_dev", "test": "mqp_test"}}
PAIRS = {"products_dev": DATA / "products/pairs/dev.tsv", "products_test": DATA / "products/pairs/test.tsv",
         "mqp_dev": DATA / "medical-questions/pairs/dev.tsv", "mqp_test": DATA / "medical-questions/pairs/test.tsv",
         "rqe_test": DATA / "medical-questions/rqe-test.tsv"}
SCORES = tuple(f"{name}_ap" for name in PAIRS) + ("stsb_test",)
F1S = tuple(f"{d['test']}_f1" for d in DOMAINS.values())  # test F1 at the threshold that maximises F1 on dev
START_MODELS = {"minilm": "all-MiniLM-L6-v2", "mpnet": "all-mpnet-base-v2"}  # settings "model": the start model
MAIN_JOB_RECIPE = "recipes/domain/products-minilm-mixcse.yaml"
RECIPES = {"products": MAIN_JOB_RECIPE, "medical": "recipes/domain/medical-questions-minilm-mixcse.yaml"}
MIXCSE_METHODS = ("simcse", "mixcse", "mixcse-single", "mixcse-wo-sg")
METHODS = MIXCSE_METHODS + ("tsdae", "ct", "mnrl", "mnrl-hard")
BASELINES = {"simcse": "SimCSE", "tsdae": "TSDAE", "ct": "CT"}  # every row's test AP is paired with these
SELECTION_KEYS = ("interpolate", "guard_data", "guard_tolerance")  # a row's label names these and every lever key
# the base of every row (mixcse config keys; the sentence-transformers rows map them onto their trainer)
DEFAULTS = {"max_steps": 200, "batch_size": 64, "learning_rate": 1e-5, "max_seq_length": 32, "temperature": 0.05,
            "eval_steps": 50}


# ------------------------------------------------------------------------------------------------ the harness
def run_missing(todo: list[tuple[str, object]], records: list[dict], train, save) -> None:
    """``train(run, folder)`` for each (key, run) of ``todo`` that no record's ``key`` names; each new record is saved
    at once. ``folder`` is the run's own under CACHE: where a run cut off mid-training left its checkpoint."""
    done = {record["key"] for record in records}
    for key, run in ((k, r) for k, r in todo if k not in done):
        t0, folder = time.perf_counter(), CACHE / key.replace("|", "_")
        records.append(train(run, folder))
        done.add(key)
        save()
        shutil.rmtree(folder / "checkpoint", ignore_errors=True)  # best/ stays
        print(f"{key}: done in {time.perf_counter() - t0:.0f} s", flush=True)


def resumable_step(out: Path) -> int | None:
    """The step of the checkpoint a cut-off run left in ``out`` (memory-mapped: only the small state is read)."""
    from mixcse.training.rundir import checkpoint_path, load_checkpoint

    return load_checkpoint(checkpoint_path(out), mmap=True)["state"]["step"] if checkpoint_path(out).exists() else None


def train_mixcse(config: dict, out: Path) -> int:
    """``mixcse.train`` into ``out``, resuming from a checkpoint there. Returns the kept step."""
    import mixcse

    resumed = resumable_step(out)
    if resumed is not None:
        print(f"{out.name}: resuming from its checkpoint at step {resumed}", flush=True)
    with contextlib.redirect_stdout(io.StringIO()):
        result = mixcse.train({**config, "output_dir": str(out)}, overwrite=resumed is None,
                              resume=resumed is not None, progress=False)
    return result.best_step


def paired(a: dict, b: dict | float) -> dict | None:
    """The mean and std of the differences a - b ({seed: value}; b a number: the start model) over the seeds both
    have, wins, and their t-test's p (``common.t_test_p``); None under two such seeds."""
    if b is None:
        return None
    b = b if isinstance(b, dict) else {s: b for s in a}
    diffs = [a[s] - b[s] for s in sorted(set(a) & set(b))]
    if len(diffs) < 2:
        return None
    mean, std, n = common.mean_std(diffs)
    return {"mean": mean, "std": std, "n": n, "wins": sum(d > 0 for d in diffs), "p": common.t_test_p(diffs)}


def fmt(ms: tuple) -> str:  # mean ± std of a ``common.mean_std`` (the std left out when there is none)
    return "–" if ms[0] is None else f"{ms[0]:.2f}" + ("" if ms[1] is None else f" ± {ms[1]:.2f}")


def fmt_diff(d: dict | None, rule: float = 0.05) -> str:
    """A paired difference: "+3.45 ± 0.89, 3/3, p = 0.02", in bold when p < ``rule``."""
    if not d:
        return "–"
    text = f"{d['mean']:+.2f} ± {d['std']:.2f}, {d['wins']}/{d['n']}" + (
        f", p = {d['p']:.2g}" if d["p"] is not None else "")
    return f"**{text}**" if d["p"] is not None and d["p"] < rule else text


# ------------------------------------------------------------------------------------------------ similarity
def settings_key(settings: dict) -> str:  # the settings that differ from DEFAULTS, or "recipe"
    return ",".join(f"{k}={settings[k]}" for k in sorted(settings) if DEFAULTS.get(k) != settings[k]) or "recipe"


def similarity_key(domain: str, method: str, settings: dict, seed: int) -> str:  # a record's key: its run
    return f"{domain}|{method}|{settings_key(settings)}|seed{seed}"


def similarity_scores(model) -> dict:
    """Both domains' dev / test pair AP, RQE test AP and STS-B test Spearman (x100) of a model folder, and each
    domain's test F1 at the threshold that maximises F1 on its dev pairs."""
    from mixcse.evaluation import evaluate

    results = evaluate(str(model), ["STSBenchmark", "pairs"], data_dir=common.DOWNSTREAM,
                       pairs_data=list(PAIRS.values()), batch_size=128, verbose=False)
    return {**{f"{name}_ap": r["ap"] for name, r in zip(PAIRS, results["pairs"].values())},
            "stsb_test": results["sts"]["STSBenchmark"]["spearman"], **dev_threshold_f1(model)}


def dev_threshold_f1(model) -> dict:
    """{domain test}_f1: each domain's test F1 x100 at the threshold that maximises F1 on its dev pairs."""
    from mixcse.evaluation.pairs import PairsEvaluator
    from mixcse.models.sentence_encoder import SentenceEncoder

    encoder, out = SentenceEncoder.load(str(model)), {}
    for d in DOMAINS.values():
        scored = PairsEvaluator([PAIRS[d["test"]]], threshold_from=PAIRS[d["dev"]])(encoder, batch_size=128)
        out[f"{d['test']}_f1"] = next(iter(scored.values()))["f1_dev_threshold"]
    return out


def rescore(args) -> None:
    """Dev-threshold F1 for the recorded runs (not the single-seed exploration) that lack it and whose kept model is
    still in the cache, and for the start models; every other score of a record stays as it was."""
    path = args.results or common.RESULTS / "similarity_adaptation.json"
    results = json.loads(path.read_text())
    for name, scores in [("zero_shot", results["zero_shot"]), *results.get("zero_shot_models", {}).items()]:
        if not set(F1S) <= set(scores):
            scores.update(dev_threshold_f1(common.minilm_path() if name == "zero_shot" else common.mpnet_path()))
    for record in results["runs"]:
        best = CACHE / record["key"].replace("|", "_") / "best"
        if not set(F1S) <= set(record) and best.is_dir():
            record.update(dev_threshold_f1(best))
            print(f"{record['key']}: " + ", ".join(f"{k} {record[k]:.2f}" for k in F1S), flush=True)
    common.write_result("similarity_adaptation", {k: v for k, v in results.items() if k not in (
        "command", "date", "commit")}, path=path, command=args.command, machine=False)


def st_data_and_loss(method: str, model, texts: list[str], seed: int, scale: float):
    """The baseline's training data and sentence-transformers loss."""
    import random

    from datasets import Dataset
    from sentence_transformers.sentence_transformer import losses

    if method == "tsdae":  # TSDAE's input noise: each word deleted with probability 0.6, at least one kept
        rng = random.Random(seed)
        noisy = [" ".join([w for w in t.split() if rng.random() > 0.6] or [rng.choice(t.split())]) for t in texts]
        return Dataset.from_dict({"noisy": noisy, "text": texts}), losses.DenoisingAutoEncoderLoss(
            model, decoder_name_or_path=common.minilm_path(), tie_encoder_decoder=True)
    if method == "ct":
        return Dataset.from_dict({"text": texts}), losses.ContrastiveTensionLossInBatchNegatives(model, scale=scale)
    hard = {"hardness_mode": "in_batch_negatives", "hardness_strength": 9.0} if method == "mnrl-hard" else {}
    return (Dataset.from_dict({"anchor": texts, "positive": texts}),
            losses.MultipleNegativesRankingLoss(model, scale=scale, **hard))


def train_sentence_transformers(domain: str, method: str, settings: dict, seed: int, out: Path) -> int:
    """The baseline through sentence-transformers' own trainer: mixcse's rows' steps, batch, learning rate, length
    and checkpoint selection (the domain's dev-pair AP at the model's inference length); the kept model in out/best.
    Returns the kept step."""
    import torch
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer.training_args import SentenceTransformerTrainingArguments
    from transformers import TrainerCallback, set_seed

    from mixcse.evaluation.pairs import PairsEvaluator

    set_seed(seed)
    texts = [t.strip() for t in (DATA / DOMAINS[domain]["train"]).read_text(encoding="utf-8").splitlines()
             if t.strip()]
    model = SentenceTransformer(common.minilm_path(), device="cuda" if torch.cuda.is_available() else "cpu")
    data, loss = st_data_and_loss(method, model, texts, seed, 1.0 / settings["temperature"])
    selector = PairsEvaluator([PAIRS[DOMAINS[domain]["dev"]]])
    inference_length, best = model.max_seq_length, {"ap": -1.0}

    def select(step: int) -> None:
        model.eval()
        model.max_seq_length = inference_length
        ap = selector.primary(selector(lambda s: model.encode(s, batch_size=128, normalize_embeddings=True)))
        if ap > best["ap"]:
            best.update(ap=ap, step=step, state={k: v.detach().to("cpu", copy=True)
                                                 for k, v in model.state_dict().items()})
        model.max_seq_length = settings["max_seq_length"]
        model.train()

    class Select(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % settings["eval_steps"] == 0 or state.global_step == settings["max_steps"]:
                select(state.global_step)

    select(0)
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out / "trainer"), max_steps=settings["max_steps"],
        per_device_train_batch_size=settings["batch_size"], learning_rate=settings["learning_rate"],
        warmup_steps=0, lr_scheduler_type="linear", weight_decay=0.0, max_grad_norm=1.0, seed=seed,
        bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(), save_strategy="no", eval_strategy="no",
        logging_steps=50, report_to="none", disable_tqdm=True, dataloader_drop_last=True)
    SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss, callbacks=[Select()]).train()
    model.load_state_dict(best["state"])
    model.max_seq_length = inference_length
    model.save(str(out / "best"))
    return best["step"]


def similarity_run(domain: str, method: str, settings: dict, seed: int, out: Path) -> dict:
    """Train one row into ``out``, score its kept model; its record (with the cost and where it ran)."""
    import resource

    import torch

    from mixcse.training.trainer import cpu_supports_bf16

    t0, gpu = time.perf_counter(), torch.cuda.is_available()
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    start = common.mpnet_path() if settings.get("model") == "mpnet" else common.minilm_path()
    if method in MIXCSE_METHODS:
        config = {"model": start, "train_file": str(DATA / DOMAINS[domain]["train"]),
                  "segment": "line", "seed": seed, "loss": method, "pooler": "avg", "select_on": "pairs",
                  "select_data": str(PAIRS[DOMAINS[domain]["dev"]]), "precision": "auto",
                  "data_dir": str(common.DOWNSTREAM), "save_candidates": True,
                  **{k: v for k, v in settings.items() if k != "model"}}
        best_step = train_mixcse(config, out)  # candidates/step-N stay: the label-budget benchmark reads them
    else:
        shutil.rmtree(out, ignore_errors=True)  # no resume: a cut-off run starts again
        best_step = train_sentence_transformers(domain, method, settings, seed, out)
    record = {"domain": domain, "method": method, "seed": seed, "settings": dict(settings),
              "key": similarity_key(domain, method, settings, seed), **similarity_scores(out / "best"),
              "best_step": best_step, "seconds": round(time.perf_counter() - t0, 1),
              "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if method in MIXCSE_METHODS and (out / "summary.json").is_file():
        summary = json.loads((out / "summary.json").read_text())
        record["best_alpha"] = summary.get("best_alpha", 1.0)
        record["guards_refused"] = sum(c.get("accepted") is False for c in summary.get("candidates") or [])
    if gpu:
        record["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    cpu = f"{common.cpu_model()} ({os.cpu_count()} vCPU), {'bf16 autocast' if cpu_supports_bf16() else 'fp32'}"
    record["machine"] = f"{torch.cuda.get_device_name(0)}, bf16 autocast" if gpu else cpu
    return record


def similarity_isolated(run: tuple, out: Path, in_process: bool) -> dict:
    """``similarity_run`` in a spawned process: its own peak RSS, nothing carried between rows. ``in_process``
    saves the process start (seconds a row on a GPU); then peak RSS is the whole process's and is not recorded."""
    import multiprocessing

    if in_process:
        return {**similarity_run(*run, out), "peak_rss_mb": None}
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(similarity_run, (*run, out))


def row_label(domain: str, method: str, settings: dict) -> str:
    """The method and the settings that differ from the base; "shipped recipe" where they are its recipe's (but one)."""
    from mixcse.training.config import TrainConfig, load_recipe
    from mixcse.training.levers import lever_keys

    path = common.REPO / RECIPES[domain].replace("-mixcse.yaml", f"-{method}.yaml")
    if path.is_file():
        recipe, default = load_recipe(path).to_dict(), TrainConfig().to_dict()
        diff = ", ".join(f"{k}={settings.get(k, default[k])}" for k in sorted({*settings, *lever_keys(),
                                                                                *SELECTION_KEYS})
                         if recipe.get(k) != settings.get(k, default[k]))
        if diff.count("=") <= 3:  # the recipe, or the recipe with up to three changes
            return f"{method}, shipped recipe" + (f" but {diff}" if diff else "")
    key = settings_key(settings)
    return f"{method} ({key})" if key != "recipe" else method


def similarity_rows(results: dict, domain: str) -> list[dict]:
    """One row per (method, settings, machine) of ``domain``'s ``runs``: mean ± std of every score over seeds, the
    cost, and the test AP paired by seed with the start model and with each of BASELINES of the same machine."""
    groups: dict[tuple, list[dict]] = {}
    for r in sorted(results["runs"], key=lambda r: r["seed"]):
        if r.get("domain", "medical") == domain:
            key = (r["method"], json.dumps(r["settings"], sort_keys=True), r["machine"])
            groups.setdefault(key, []).append(r)
    test, labels = DOMAINS[domain]["test"] + "_ap", {g: row_label(domain, g[0], json.loads(g[1])) for g in groups}
    base: dict = {}  # (baseline, machine) -> settings -> {seed: test AP}
    for (method, settings, machine), runs in groups.items():
        if method in BASELINES:
            base.setdefault((method, machine), {})[settings] = {r["seed"]: r[test] for r in runs}
    rows = []
    for (method, settings, machine), runs in sorted(groups.items(), key=lambda g: (METHODS.index(g[0][0]), g[0][1:])):
        ours = {r["seed"]: r[test] for r in runs}
        kept = sum(r["best_step"] == 0 for r in runs)  # seeds where no checkpoint beat the start model on dev
        kept = f"; start model kept on {kept}/{len(runs)} seeds" if kept else ""
        start = start_scores(results, json.loads(settings))
        row = {"label": labels[(method, settings, machine)] + kept, "machine": machine, "seeds": len(runs),
               **{s: common.mean_std([r.get(s) for r in runs]) for s in SCORES + F1S},
               "seconds": common.mean_std([r["seconds"] for r in runs]),
               "alpha": common.mean_std([r.get("best_alpha") for r in runs]),  # the chosen blend weight
               "vs_start": paired(ours, start[test]) if start else None,
               "vs_mpnet": paired(ours, results.get("zero_shot_models", {}).get("mpnet", {}).get(test))}
        for other in (b for b in BASELINES if b != method and (b, machine) in base):
            same = base[(other, machine)]  # its row of these settings, else of the most seeds (shipped recipe first)
            row[f"vs_{other}"] = paired(ours, same.get(settings) or max(same.items(), key=lambda kv: (
                len(kv[1]), labels[(other, kv[0], machine)].endswith("shipped recipe")))[1])
        rows.append(row)
    return rows


def start_scores(results: dict, settings: dict) -> dict | None:
    """The zero-shot scores of a row's start model (all-MiniLM-L6-v2 unless the settings name another)."""
    model = settings.get("model", "minilm")
    return results["zero_shot"] if model == "minilm" else results.get("zero_shot_models", {}).get(model)


def main_machine(rows: list[dict]) -> list[dict]:
    """The rows of the machine that ran the most 3-seed rows: the tables users read (the others are on the page of
    every run)."""
    full = [r["machine"] for r in rows if r["seeds"] >= 3]
    return [r for r in rows if r["machine"] == max(set(full), key=full.count)] if full else rows


def render_decision(results: dict | None = None) -> str:
    """The decision table of docs/domain-adaptation.md: per domain, the start models first, then every row's test AP
    and dev-threshold F1, its paired differences, and the outside checks."""
    from mixcse.utils.tables import markdown_table

    results = results or json.loads((common.RESULTS / "similarity_adaptation.json").read_text())
    out, starts = [], {"minilm": results["zero_shot"], **results.get("zero_shot_models", {})}
    for domain in DOMAINS:
        rows, test = main_machine(similarity_rows(results, domain)), DOMAINS[domain]["test"] + "_ap"
        if not rows:
            continue
        mpnet = "mpnet" in starts
        table = [[f"start model ({START_MODELS[name]}, zero-shot)", "–", f"{zs[test]:.2f}",
                  f"{zs[f1]:.2f}" if (f1 := DOMAINS[domain]["test"] + "_f1") in zs else "–", "–",
                  *["–"] * len(BASELINES), *(["–"] if mpnet else []), f"{zs['rqe_test_ap']:.2f}",
                  f"{zs['stsb_test']:.2f}", "–", "–"] for name, zs in starts.items()]
        table += [[r["label"], str(r["seeds"]), fmt(r[test]), fmt(r[DOMAINS[domain]["test"] + "_f1"]),
                   fmt_diff(r["vs_start"]), *(fmt_diff(r.get(f"vs_{b}")) for b in BASELINES),
                   *([fmt_diff(r["vs_mpnet"])] if mpnet else []), fmt(r["rqe_test_ap"]), fmt(r["stsb_test"]),
                   fmt(r["alpha"]), r["machine"]] for r in rows]
        out += [f"**{domain}** (test: {PAIRS[DOMAINS[domain]['test']].parent.parent.name} test pairs, AP and F1 "
                f"x100)", "",
                *markdown_table(["row", "n", "test AP", "test F1 (dev threshold)", "vs start",
                                 *(f"vs {n}" for n in BASELINES.values()), *(["vs mpnet zero-shot"] if mpnet else []),
                                 "RQE test AP", "STS-B test", "a", "machine"], table), ""]
    return "\n".join(out + ["n: seeds; mean ± std over seeds; differences (of test AP) paired by seed: mean ± std, "
                            "seeds ahead, two-sided t-test p; bold where p < 0.05. vs start: against the row's own "
                            "start model. test F1: at the threshold that maximises F1 on the dev pairs (– where the "
                            "run's model was not kept to score it). a: the chosen model's weight on its checkpoint "
                            "(1: the checkpoint itself; below 1: a blend with the start model; – where not "
                            "recorded). Rows never pool machines; the rows of other machines are on the page of "
                            "every run."])


def render_tuning(results: dict | None = None) -> str:
    """Products dev AP (test AP) of each method's tuning points on seed 0, the 30-step recipe's budget: MixCSE's
    lambda x tau, SimCSE's tau, CT's and TSDAE's learning rate. The best dev point of each method in bold."""
    from mixcse.utils.tables import markdown_table

    results = results or json.loads((common.RESULTS / "similarity_adaptation.json").read_text())
    base = {"max_steps": 30, "eval_steps": 15, "max_seq_length": 64, "domain": "products", "seed": 0}
    points: dict = {}
    for r in results["runs"] + results["sweep"]:
        st = r["settings"]
        if all((r.get(k) if k in ("domain", "seed") else st.get(k)) == v for k, v in base.items()) and \
                "model" not in st and "positives" not in st:
            key = (r["method"], st.get("lam", 0.2 if r["method"].startswith("mixcse") else None),
                   st["temperature"], st["learning_rate"])
            points.setdefault(key, r)
    lines = []
    for method, axes in (("mixcse", ("lam", "temperature")), ("simcse", ("temperature",)),
                         ("ct", ("learning_rate",)), ("tsdae", ("learning_rate",))):
        mine = {k: r for k, r in points.items() if k[0] == method}
        if not mine:
            continue
        best = max(mine.values(), key=lambda r: r["products_dev_ap"])
        cell = lambda r: (f"**{r['products_dev_ap']:.2f} ({r['products_test_ap']:.2f})**" if r is best  # noqa: E731
                          else f"{r['products_dev_ap']:.2f} ({r['products_test_ap']:.2f})")
        if method == "mixcse":
            lams, taus = sorted({k[1] for k in mine}), sorted({k[2] for k in mine})
            rows = [[f"λ = {lam:g}", *(cell(mine[k]) if (k := next((x for x in mine if x[1] == lam and x[2] == tau),
                                                                   None)) else "–" for tau in taus)] for lam in lams]
            lines += [f"**MixCSE** (lr {next(iter(mine))[3]:g}): dev AP (test AP) by λ and τ", "",
                      *markdown_table(["", *(f"τ = {t:g}" for t in taus)], rows), ""]
        else:
            axis = 2 if axes == ("temperature",) else 3
            keys = sorted(mine, key=lambda k: k[axis])
            name = {"simcse": "SimCSE", "ct": "CT", "tsdae": "TSDAE"}[method]
            lines += [f"**{name}**: dev AP (test AP) by {'τ' if axis == 2 else 'learning rate'}", "",
                      *markdown_table([f"{'τ' if axis == 2 else 'lr'} = {k[axis]:g}" for k in keys],
                                      [[cell(mine[k]) for k in keys]]), ""]
    return "\n".join(lines + ["Seed 0, products, the shipped recipe's budget (30 steps of 64 titles, length 64, "
                              "selection every 15 steps on the dev pairs; MixCSE/SimCSE with the STS-B dev guard); "
                              "bold: the best dev AP of the method, the setting of its 3-seed row where one ran.", "",
                              *tuned_comparison(results, points)])


def tuned_comparison(results: dict, points: dict) -> list[str]:
    """Paired test AP / dev-threshold F1 differences of the 3-seed rows at each method's best dev point: MixCSE
    against each baseline, and text views (positives: augment) on against off."""
    from mixcse.utils.tables import markdown_table

    def seeds(settings: dict, method: str) -> dict:
        return {r["seed"]: r for r in results["runs"] if r.get("domain") == "products" and r["method"] == method
                and r["settings"] == settings}

    tuned = {}
    for method in ("mixcse", "simcse", "ct", "tsdae"):
        mine = [r for k, r in points.items() if k[0] == method]
        if mine:
            best = max(mine, key=lambda r: r["products_dev_ap"])["settings"]
            tuned[method] = (best, seeds(best, method))
    rows = []
    for name, (a, b) in {**{f"MixCSE − {n}": (("mixcse",), (m,)) for m, n in BASELINES.items()},
                         "MixCSE augment − MixCSE": (("mixcse", "augment"), ("mixcse",)),
                         "SimCSE augment − SimCSE": (("simcse", "augment"), ("simcse",))}.items():
        if a[0] not in tuned or b[0] not in tuned:
            continue
        first = tuned[a[0]][1] if len(a) == 1 else seeds({**tuned[a[0]][0], "positives": "augment"}, a[0])
        second = tuned[b[0]][1]
        ap = paired({s: r["products_test_ap"] for s, r in first.items()},
                    {s: r["products_test_ap"] for s, r in second.items()})
        f1 = paired({s: r["products_test_f1"] for s, r in first.items() if r.get("products_test_f1") is not None},
                    {s: r["products_test_f1"] for s, r in second.items() if r.get("products_test_f1") is not None})
        if ap:
            rows.append([name, str(ap["n"]), fmt_diff(ap), fmt_diff(f1)])
    if not rows:
        return []
    return ["Each method at its own best dev point, 3 seeds, differences paired by seed (test AP; test F1 at the "
            "dev threshold):", "", *markdown_table(["comparison", "n", "test AP", "test F1"], rows)]


def render_runs(results: dict | None = None) -> str:
    """Every row with every score (both domains, RQE, STS-B), its cost, and the single-seed exploration."""
    from mixcse.utils.tables import markdown_table

    results = results or json.loads((common.RESULTS / "similarity_adaptation.json").read_text())
    names = ["products dev", "products test", "MQP dev", "MQP test", "RQE test", "STS-B test"]
    text = []
    for domain in DOMAINS:
        rows = [["start model", "–", *(f"{results['zero_shot'].get(s, float('nan')):.2f}" for s in SCORES), "–", "–"]]
        rows += [[r["label"], str(r["seeds"]), *(fmt(r[s]) for s in SCORES), fmt(r["seconds"]), r["machine"]]
                 for r in similarity_rows(results, domain)]
        text += [f"### Trained on {domain}", "", *markdown_table(["row", "n", *names, "seconds a run", "machine"],
                                                                 rows), ""]
    sweep = [[r.get("domain", "medical"), r["method"], settings_key(r["settings"]), str(r["seed"]),
              *(f"{r[s]:.2f}" if r.get(s) is not None else "–" for s in SCORES), str(r["best_step"]), r["machine"]]
             for r in sorted(results["sweep"], key=lambda r: (r.get("domain", "medical"), r["method"], r["key"]))]
    if sweep:
        text += ["### Exploration (single seeds)", "", *markdown_table(
            ["domain", "method", "settings", "seed", *names, "best step", "machine"], sweep)]
    return "\n".join(text)


def render_readme_domain() -> str:
    """The README's table: per domain the start model, the SimCSE and MixCSE recipes and the field's baselines."""
    from mixcse.utils.tables import markdown_table

    results, table = json.loads((common.RESULTS / "similarity_adaptation.json").read_text()), []
    for domain in DOMAINS:
        test, zs = DOMAINS[domain]["test"] + "_ap", results["zero_shot"]
        f1 = DOMAINS[domain]["test"] + "_f1"
        table.append([domain, "start model", "–", f"{zs[test]:.2f}", f"{zs[f1]:.2f}" if f1 in zs else "–", "–", "–",
                      f"{zs['rqe_test_ap']:.2f}", f"{zs['stsb_test']:.2f}", "–"])
        table += [[domain, r["label"], str(r["seeds"]), fmt(r[test]), fmt(r[f1]), fmt_diff(r["vs_start"]),
                   fmt_diff(r.get("vs_simcse")), fmt(r["rqe_test_ap"]), fmt(r["stsb_test"]), r["machine"]]
                  for r in main_machine(similarity_rows(results, domain))
                  if r["seeds"] >= 3 and (r["label"].split(";")[0].endswith(", shipped recipe")
                                          or r["label"].split()[0] in ("tsdae", "ct"))]
        # the shipped recipes and the field's baselines; every other row is in docs/domain-adaptation.md
    return "\n".join(markdown_table(["trained on", "row", "n", "test AP", "test F1", "vs start", "vs SimCSE",
                                      "RQE test AP", "STS-B test", "machine"], table))


def render_main_job() -> str:
    """The README's lines on the main job: one per record of benchmarks/results/main_job.json (a machine kind each)."""
    lines = []
    for job in json.loads((common.RESULTS / "main_job.json").read_text())["records"]:
        s, parts, seeds = job["summary"], job["summary"].get("seconds") or {}, job.get("seeds") or []
        guard, test = (s.get("guards") or [s.get("guard") or {}])[0], next(iter(s["test_pairs"].values()))
        line = (f"- {job['kind']} ({job['date'][:10]}): dev AP {s['raw_dev']:.2f} → {s['best_dev']:.2f} (step "
                f"{s['best_step']}), held-out test AP {test['start']:.2f} → {test['best']:.2f}, guard STS-B dev "
                f"{guard.get('start', float('nan')):.2f} → {guard.get('best', float('nan')):.2f}, in "
                f"{job['wall_seconds']:.0f} s wall")
        line += " (" + ", ".join(f"{k} {v:.0f} s" for k, v in parts.items()) + ")" if parts else ""
        if len(seeds) > 1:
            walls = [r["wall_seconds"] for r in seeds]
            line += (f"; over {len(seeds)} seeds test AP {fmt(common.mean_std([r['test_ap'] for r in seeds]))}, "
                     f"wall {min(walls):.0f}–{max(walls):.0f} s")
        lines.append(line + ".")
    return ("Measured (`benchmarks/results/main_job.json`, one record per machine kind; each run into a new output "
            "folder, with no score cached from an earlier run):\n" + "\n".join(lines))


# ------------------------------------------------------------------------------------------------ label budget
BUDGETS = (25, 50, 100, 200, 400, None)  # labelled dev pairs selection may read; None: all of them


def candidate_scores(folder: Path, summary: dict, domain: str, guards: list) -> list[dict]:
    """Every candidate a run scored (start, checkpoints, blends; candidates/step-N on disk): its dev and test pair
    cosines and whether every guard passes (``guards``: the recipe's, as selection.Guard)."""
    from mixcse.evaluation.pairs import read_pairs
    from mixcse.models.merge import merge_models
    from mixcse.models.sentence_encoder import SentenceEncoder

    sets = {name: read_pairs(PAIRS[DOMAINS[domain][name]]) for name in ("dev", "test")}
    out, starts = [], None
    for c in summary["candidates"]:  # in the order the run scored them: ties go to the earliest, as in a run
        with tempfile.TemporaryDirectory() as tmp:
            path = folder / "candidates" / f"step-{c['step']}"
            if c["alpha"] != 1.0:
                path = Path(tmp) / "blend"
                merge_models([str(folder / "candidates" / "step-0"), str(folder / "candidates" / f"step-{c['step']}")],
                             [1 - c["alpha"], c["alpha"]], output=path)
            encoder = SentenceEncoder.load(str(path))
            row = {"step": c["step"], "alpha": c["alpha"]}
            for name, ps in sets.items():
                a, b = encoder.encode(ps.a, batch_size=64), encoder.encode(ps.b, batch_size=64)
                row[name] = ((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).tolist()
            scores = [g.evaluator.primary(g.evaluator(encoder, batch_size=64)) for g in guards]
        starts = scores if c["step"] == 0 else starts
        row["passes"] = all(g.passes(s, s0) for g, s, s0 in zip(guards, scores, starts))
        out.append(row)
    return out


def pick(candidates: list[dict], labels, rows) -> dict:
    """The candidate a run would ship when selection reads only ``rows`` of the dev pairs: the best dev AP among
    those every guard passes (the start model first on a tie, as in training)."""
    from sklearn.metrics import average_precision_score

    def ap(c):
        return average_precision_score(labels[rows], np.asarray(c["dev"])[rows])

    return max((c for c in candidates if c["passes"]), key=lambda c: (ap(c), c["step"] == 0))


def label_budget(args) -> None:
    """Held-out test AP of the model selection picks when it reads only N labelled dev pairs (stratified by label,
    3 subsamples each), among the saved candidates of the shipped MixCSE recipe's 3-seed rows, both domains."""
    from sklearn.metrics import average_precision_score

    from mixcse.evaluation.pairs import read_pairs
    from mixcse.evaluation.selection import build_guard
    from mixcse.training.config import load_recipe
    from mixcse.training.selection import Guard

    results = json.loads((common.RESULTS / "similarity_adaptation.json").read_text())
    record = {"budgets": [n or "all" for n in BUDGETS], "subsamples": 3, "domains": {}}
    for domain in DOMAINS:
        recipe = load_recipe(common.REPO / RECIPES[domain])
        rows = [r for r in results["runs"] if r.get("domain") == domain and r["method"] == "mixcse"
                and row_label(domain, "mixcse", r["settings"]) == "mixcse, shipped recipe"
                and (CACHE / r["key"].replace("|", "_") / "candidates").is_dir()]
        guards = [Guard(build_guard(data, data_dir=str(common.DOWNSTREAM)), data, tolerance)
                  for data, tolerance in recipe.guard_list()]
        dev, test = (read_pairs(PAIRS[DOMAINS[domain][name]]) for name in ("dev", "test"))
        labels, test_labels = np.asarray(dev.scores) > 0.5, np.asarray(test.scores) > 0.5
        per_n: dict = {str(n or "all"): [] for n in BUDGETS}
        for r in rows:
            folder = CACHE / r["key"].replace("|", "_")
            candidates = candidate_scores(folder, json.loads((folder / "summary.json").read_text()), domain, guards)
            for n in BUDGETS:
                for k in range(1 if n is None else 3):
                    rng = np.random.default_rng([r["seed"], k, n or 0])
                    positives = 0 if n is None else round(n * labels.mean())  # the file's share of positives
                    take = np.arange(len(labels)) if n is None else np.concatenate([
                        rng.choice(np.flatnonzero(labels), positives, replace=False),
                        rng.choice(np.flatnonzero(~labels), n - positives, replace=False)])
                    chosen = pick(candidates, labels, take)
                    per_n[str(n or "all")].append({"seed": r["seed"], "subsample": k, "step": chosen["step"],
                                                   "alpha": chosen["alpha"], "test_ap": 100 * average_precision_score(
                                                       test_labels, chosen["test"])})
        full = common.mean_std([p["test_ap"] for p in per_n["all"]])
        within = [full[1] is not None and abs(common.mean_std([p["test_ap"] for p in picks])[0] - full[0]) <= full[1]
                  for picks in per_n.values()]  # the smallest N from which every larger N is within the spread too
        enough = next((n for i, n in enumerate(per_n) if all(within[i:])), None)
        record["domains"][domain] = {"seeds": sorted(r["seed"] for r in rows), "picks": per_n,
                                     "smallest_within_seed_spread": enough}
        print(f"{domain}: {len(rows)} runs; within the seed spread of the all-pairs pick from N = {enough}", flush=True)
    common.write_result("label_budget", record, path=args.results, command=args.command)
    page, render = BLOCKS["label-budget"]
    if not args.results:
        common.write_block(common.REPO / page, render(), *common.block_markers("label-budget"))
    print(render())


def render_label_budget() -> str:
    """The label-budget table of docs/domain-adaptation.md from benchmarks/results/label_budget.json."""
    from mixcse.utils.tables import markdown_table

    job = json.loads((common.RESULTS / "label_budget.json").read_text())
    lines = []
    for domain, d in job["domains"].items():
        rows = [[n, str(len(picks)), fmt(common.mean_std([p["test_ap"] for p in picks])),
                 f"{sum(p['alpha'] != 1.0 for p in picks)}/{len(picks)}"] for n, picks in d["picks"].items()]
        lines += [f"**{domain}** (the shipped MixCSE recipe, seeds {', '.join(map(str, d['seeds']))}; "
                  f"{common.machine_kind(job['machine'])}, {job['date'][:10]}): the pick is within the seed spread "
                  f"of the all-pairs pick from N = {d['smallest_within_seed_spread']} labelled dev pairs.", "",
                  *markdown_table(["dev pairs N", "picks (seeds x subsamples)", "test AP of the pick",
                                   "picks that are blends"], rows), ""]
    return "\n".join(lines + ["Subsamples keep the dev file's share of positive pairs; the candidates are those the "
                              "runs scored (start model, checkpoints, searched blends), each guard-checked on STS-B "
                              "dev; test AP x100, mean ± std over picks."])


BLOCKS = {"domain-decision": ("docs/domain-adaptation.md", render_decision),
          "domain-tuning": ("docs/domain-adaptation.md", render_tuning),
          "label-budget": ("docs/domain-adaptation.md", render_label_budget),
          "similarity-runs": ("docs/similarity_adaptation_results.md", render_runs),
          "main-job": ("README.md", render_main_job), "readme-domain": ("README.md", render_readme_domain)}


def similarity(args) -> None:
    """The zero-shot scores and every planned row that the results JSON lacks, then the pages and figure."""
    path = args.results or common.RESULTS / "similarity_adaptation.json"
    results = json.loads(path.read_text()) if path.is_file() else {"zero_shot": None, "runs": [], "sweep": []}
    here, machines = common.machine_info(), results.setdefault("machines", [])  # every machine that added a row
    if not any(m.get("gpu") == here.get("gpu") and m.get("cpu") == here.get("cpu") for m in machines):
        machines.append(here)
    others = results.setdefault("zero_shot_models", {})  # start models beside all-MiniLM-L6-v2 (settings "model")
    save = lambda: common.write_result("similarity_adaptation", {  # noqa: E731
        **{k: results[k] for k in ("zero_shot", "zero_shot_models", "runs", "sweep")}, "recipe": DEFAULTS,
        "code": common.code_version(), "machines": machines}, path=path, command=args.command, machine=False)
    if not args.report_only:
        if results["zero_shot"] is None or not set(SCORES) <= set(results["zero_shot"]):
            results["zero_shot"] = similarity_scores(common.minilm_path())
            save()
        if args.set.get("model") == "mpnet" and "mpnet" not in others:
            others["mpnet"] = similarity_scores(common.mpnet_path())
            save()
        base = {**DEFAULTS, **args.set}
        grid = [dict(zip(args.grid, values)) for values in itertools.product(*args.grid.values())]
        todo = [(args.domain, m, {**base, **g}, s) for g in grid for m in args.methods for s in args.seeds]
        run_missing([(similarity_key(*run), run) for run in todo], results["sweep" if args.grid else "runs"],
                    lambda run, out: similarity_isolated(run, out, args.in_process), save)
    for name in ("domain-decision", "domain-tuning", "similarity-runs"):
        page, render = BLOCKS[name]
        common.write_block(args.docs / Path(page).name, render(results), *common.block_markers(name))
    print(render_decision(results))


# ------------------------------------------------------------------------------------------------ main job
def main_job(args) -> None:
    """`mixcse train` of the README's main-job recipe in a subprocess: its wall time, summary and report, as the
    record of this machine kind (CPU model, torch's kernels, precision) in main_job.json; other kinds' records stay.
    ``--no-bf16``: the run a CPU without bf16 gets, on one with it: fp32, torch/oneDNN/MKL kernels limited to AVX2.
    ``--seeds``: the recipe's seed (default) or several, one after another; the record keeps each seed's wall time
    and scores, and the first seed's summary and report."""
    import resource

    import yaml

    env = dict(os.environ)
    if args.no_bf16:
        env.update(ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2", MKL_ENABLE_INSTRUCTIONS="AVX2")
        args.set.setdefault("precision", "fp32")
    runs = []
    for seed in args.seeds or [None]:
        with tempfile.TemporaryDirectory(prefix="main-job-") as tmp:
            out = Path(tmp) / "run"
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "mixcse", "train", MAIN_JOB_RECIPE, f"output_dir={out}",
                                   *(f"{k}={v}" for k, v in args.set.items()),
                                   *([f"seed={seed}"] if seed is not None else [])], cwd=common.REPO,
                                  capture_output=True, text=True, env=env)
            wall = time.perf_counter() - t0
            if done.returncode:
                print(done.stderr[-3000:], file=sys.stderr)
                raise SystemExit(done.returncode)
            summary = json.loads((out / "summary.json").read_text())
            precision = yaml.safe_load((out / "config.yaml").read_text())["precision"]
        test = next(iter(summary["test_pairs"].values()))
        runs.append({"seed": seed, "wall_seconds": round(wall, 1), "best_step": summary["best_step"],
                     "dev_ap": summary["best_dev"], "test_ap": test["best"], "done": done, "summary": summary})
        print(f"seed {seed}: dev AP {summary['best_dev']:.2f}, test AP {test['best']:.2f}, {wall:.0f} s wall",
              flush=True)
    done, summary, wall = runs[0]["done"], runs[0]["summary"], runs[0]["wall_seconds"]
    kernels = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                             env=env, capture_output=True, text=True).stdout.strip()
    report = [line for line in done.stdout.splitlines()
              if line.startswith(("start ", "held-out", "guard", "best/", "decision:", "next:", "time:"))]
    machine = common.machine_info()
    machine.update(torch_kernels=kernels, precision=precision,
                   kernel_limits={k: env[k] for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA",
                                                      "MKL_ENABLE_INSTRUCTIONS") if k in env})
    kind = (f"{common.machine_kind(machine)}, {precision}, torch kernels {kernels}"
            + (f" (limited on a CPU with bf16: {' '.join(f'{k}={v}' for k, v in machine['kernel_limits'].items())})"
               if machine["kernel_limits"] and machine["cpu_bf16"] else ""))
    record = {"kind": kind, "command": args.command, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "commit": common.code_version(), "machine": machine, "recipe": MAIN_JOB_RECIPE,
              "wall_seconds": round(wall, 1), "summary": summary, "report": report,
              "seeds": [{k: v for k, v in r.items() if k not in ("done", "summary")} for r in runs],
              "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)}
    path = args.results or common.RESULTS / "main_job.json"
    old = json.loads(path.read_text()).get("records", []) if path.is_file() else []
    common.write_result("main_job", {"records": [r for r in old if r.get("kind") != kind] + [record]}, path=path,
                        command=args.command, machine=False)
    print("\n".join(report) + f"\nwall {wall:.0f} s ({kind})")


# ------------------------------------------------------------------------------------------------ CLI
def setting(item: str) -> tuple[str, list]:
    """KEY=VALUE or KEY=V1,V2 as (key, [values]), numbers parsed."""
    key, eq, raw = item.partition("=")
    if not key or not eq or not raw:
        raise argparse.ArgumentTypeError(f"{item!r} is not KEY=VALUE")
    return key, [json.loads(v) if v[:1].isdigit() or v[:1] in "-[" else v for v in raw.split(",")]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.domain", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="bench", required=True)
    s = sub.add_parser("similarity", help="pair similarity on two domains, against sentence-transformers")
    s.add_argument("--results", type=Path, help="default: benchmarks/results/similarity_adaptation.json")
    s.add_argument("--docs", type=Path, default=DOCS, help="where the generated pages and figure go")
    s.add_argument("--report-only", action="store_true", help="no training: the outputs from the JSON")
    s.add_argument("--domain", choices=DOMAINS, default="products", help="the unlabeled text and dev pairs")
    s.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    s.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    s.add_argument("--grid", nargs="+", type=setting, default=[], metavar="KEY=V1,V2", help="a sweep: values to try")
    s.add_argument("--in-process", action="store_true", help="no process per row (no peak RSS): GPU machines")
    b = sub.add_parser("label-budget", help="how many labelled dev pairs selection needs (after similarity)")
    b.add_argument("--results", type=Path, help="default: benchmarks/results/label_budget.json")
    r = sub.add_parser("rescore", help="dev-threshold F1 for recorded runs whose model is cached")
    r.add_argument("--results", type=Path, help="default: benchmarks/results/similarity_adaptation.json")
    m = sub.add_parser("main-job", help="the README's main job, timed")
    m.add_argument("--results", type=Path, help="default: benchmarks/results/main_job.json")
    m.add_argument("--no-bf16", action="store_true", help="fp32 on torch/oneDNN/MKL kernels limited to AVX2")
    m.add_argument("--seeds", nargs="+", type=int, help="several seeds, one after another (default: the recipe's)")
    for p in (s, m):
        p.add_argument("--set", nargs="+", type=setting, default=[], metavar="KEY=VALUE", help="recipe changes")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    args.command = " ".join(["python -m benchmarks.domain", *argv])
    args.set = {key: values[0] for key, values in getattr(args, "set", [])}
    args.grid = dict(getattr(args, "grid", []))
    {"similarity": similarity, "main-job": main_job, "label-budget": label_budget, "rescore": rescore}[args.bench](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
