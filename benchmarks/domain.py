"""Domain adaptation: does unsupervised SimCSE / MixCSE on in-domain text help? Three benchmarks, one run harness.

    python -m benchmarks.domain retrieval --backbones minilm --presets simcse mixcse --seeds 0 --segments sentence
    python -m benchmarks.domain similarity --methods mixcse --seeds 0 --grid learning_rate=5e-6,1e-5,3e-5
    python -m benchmarks.domain similarity --seeds 0 1 2    # every method x seed (the defaults: the whole plan)
    python -m benchmarks.domain retrieval --report-only     # (and similarity --report-only) the table and figure
    python -m benchmarks.domain main-job

retrieval (-> results/domain_adaptation.json, docs/domain_adaptation_results.md and .png): trained on the SciFact
corpus (sentences or passages), checkpoints selected on nDCG@10 of the train claims over a seeded sub-corpus (the
start model a candidate), the kept model scored on the test claims over the whole corpus (nDCG@10, recall@100).
similarity (-> results/similarity_adaptation.json, docs/similarity_adaptation_results.md and .png): all-MiniLM-L6-v2
trained on unlabeled patient questions, selected on the MQP dev-pair AP, scored on MQP dev / test AP, RQE test AP and
STS-B test; mixcse's objectives through ``mixcse.train``, the baselines (TSDAE, CT, MNRL = SimCSE, ``mnrl-hard``)
through sentence-transformers' own trainer and losses. ``--grid``: a sweep (the JSON's ``sweep``), else ``runs``.
main-job (-> results/main_job.json): `mixcse train` on the medical-questions recipe, as a new user runs it, timed.

The results JSON is the run cache: a run whose key a record holds is never trained again, and each finished run is
written at once; a run cut off mid-training continues from its checkpoint in benchmarks/cache/domain/ (mixcse's
resume is exact). So the same command resumes a benchmark; to redo a run, delete its record.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks import common

CACHE = common.REPO / "benchmarks" / "cache" / "domain"
DOCS = common.REPO / "docs"
SCIFACT = common.SHARED / "data" / "domain" / "scifact"
DATA = common.SHARED / "data" / "domain" / "medical-questions"
PAIRS = {"mqp_dev": DATA / "pairs" / "dev.tsv", "mqp_test": DATA / "pairs" / "test.tsv",
         "rqe_test": DATA / "rqe-test.tsv"}
MAIN_JOB_RECIPE = "recipes/domain/medical-questions-minilm-mixcse.yaml"


# ------------------------------------------------------------------------------------------------ the harness
def write(path: Path, name: str, body: dict, command: str) -> None:
    """The one results writer: the benchmark's name, the command and the date, then ``body``; atomic, NaN as null."""
    from mixcse.utils.files import atomic_write_json, to_jsonable

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, to_jsonable({"benchmark": name, "command": command,
                                         "date": time.strftime("%Y-%m-%d %H:%M:%S"), **body}))
    print(f"wrote {path}", flush=True)


def run_missing(todo: list[tuple[str, object]], records: list[dict], key_of, train, save) -> None:
    """``train(run, folder)`` for each (key, run) of ``todo`` that no record has; each new record is saved at once.
    ``folder`` is the run's own under CACHE: where a run cut off mid-training left its checkpoint."""
    done = {key_of(record) for record in records}
    for key, run in todo:
        if key in done:
            continue
        t0 = time.perf_counter()
        records.append(train(run, CACHE / key))
        done.add(key)
        save()
        shutil.rmtree(CACHE / key / "checkpoint", ignore_errors=True)  # best/ stays (later evaluations)
        print(f"{key}: done in {time.perf_counter() - t0:.0f} s", flush=True)


def resumable_step(out: Path) -> int | None:
    """The step of the checkpoint a cut-off run left in ``out`` (memory-mapped: only the small state is read)."""
    from mixcse.training.rundir import checkpoint_path, load_checkpoint

    if not checkpoint_path(out).exists():
        return None
    return load_checkpoint(checkpoint_path(out), mmap=True)["state"]["step"]


def train_mixcse(config: dict, out: Path):
    """``mixcse.train`` into ``out``, resuming from a checkpoint there. Returns (its TrainResult, resumed step)."""
    import mixcse

    resumed = resumable_step(out)
    if resumed is not None:
        print(f"{out.name}: resuming from its checkpoint at step {resumed}", flush=True)
    with contextlib.redirect_stdout(io.StringIO()):
        result = mixcse.train({**config, "output_dir": str(out)}, overwrite=resumed is None,
                              resume=resumed is not None, progress=False)
    return result, resumed


def mean_std(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    return m, (math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else float("nan"))


def paired(a: dict, b: dict) -> dict | None:
    """Differences a - b ({seed: value}) over the seeds both have; a t-test when there are two or more."""
    from scipy import stats

    seeds = sorted(set(a) & set(b))
    if not seeds:
        return None
    diffs = [a[s] - b[s] for s in seeds]
    m, sd = mean_std(diffs)
    p = float(stats.ttest_1samp(diffs, 0.0).pvalue) if len(diffs) > 1 and sd > 0 else None
    return {"mean": m, "std": sd, "n": len(diffs), "p": p, "wins": sum(d > 0 for d in diffs),
            "losses": sum(d < 0 for d in diffs)}


def fmt(ms, sign: str = "") -> str:
    """mean ± std (the std left out when there is none); ``sign="+"``: the mean signed."""
    return f"{ms[0]:{sign}.2f}" + ("" if math.isnan(ms[1]) else f" ± {ms[1]:.2f}")


def fmt_diff(d) -> str:
    if not d:
        return "–"
    return (fmt((d["mean"], d["std"]), "+") + f" ({d['wins']} up, {d['losses']} down of {d['n']}"
            + (")" if d["p"] is None else f", p = {d['p']:.2g})"))


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# ------------------------------------------------------------------------------------------------ retrieval
METRICS = ("ndcg@10", "recall@100")
# MiniLM keeps its mean pooling and a small learning rate (it is contrastively trained already); the stand-in is
# trained as the paper trains BERT ([CLS] + MLP at train time).
BACKBONES = {"minilm": {"pooler": "avg", "learning_rate": 1e-5}, "standin": {"pooler": "cls", "learning_rate": 3e-5}}
SEGMENT_LENGTH = {"sentence": 64, "passage": 256}  # training max_seq_length per segmentation
PUBLISHED = {  # GPL paper (Wang et al., 2022), SciFact nDCG@10, msmarco-distilbert start: context, another model
    "zero-shot": 57.1, "SimCSE": 55.0, "CT": 55.6, "MLM": 60.0, "TSDAE": 62.8, "GPL": 65.2}
DEFAULT_BATCH, DEFAULT_EVAL_STEPS = 64, 50
DEFAULT_SELECT_DOCS = 500  # the selection sub-corpus: the train claims' relevant abstracts + 500 others
LOSS_TAIL = 5  # "loss at the end": the mean of the last LOSS_TAIL logged losses (each is one batch's)
SAVE_STEPS = 10  # checkpoint cadence: what a cut-off run loses at most (saving does not change training)


@dataclass(frozen=True)
class Run:
    backbone: str
    preset: str
    seed: int
    segment: str
    temperature: float = 0.05
    steps: int = 200
    batch_size: int = DEFAULT_BATCH
    eval_steps: int = DEFAULT_EVAL_STEPS
    select_docs: int = DEFAULT_SELECT_DOCS
    positives: str = "dropout"  # or neighbours / title: then ``segment`` only sets the training length
    learning_rate: float | None = None  # None: the backbone's (BACKBONES)
    mix_lambda: float | None = None  # None: the preset's λ (0.2)
    max_length: int | None = None  # training max_seq_length; None: SEGMENT_LENGTH of the segmentation

    @property
    def key(self) -> str:
        """The run's name: every setting, those left at their defaults omitted."""
        pairs = "" if self.positives == "dropout" else f"-{self.positives}"
        optional = (("lr", self.learning_rate), ("lam", self.mix_lambda), ("len", self.max_length),
                    ("every", None if self.eval_steps == DEFAULT_EVAL_STEPS else self.eval_steps),
                    ("docs", None if self.select_docs == DEFAULT_SELECT_DOCS else self.select_docs))
        extra = "".join(f"-{name}{value:g}" for name, value in optional if value is not None)
        return (f"{self.backbone}-{self.preset}-{self.segment}{pairs}-t{self.temperature:g}-s{self.steps}"
                f"-b{self.batch_size}{extra}-seed{self.seed}")

    def train_config(self) -> dict:
        return {"model": common.backbone_path(self.backbone), "train_file": str(SCIFACT / "corpus.jsonl"),
                "loss": self.preset, "temperature": self.temperature, "segment": self.segment,
                "max_seq_length": self.max_length or SEGMENT_LENGTH[self.segment], **BACKBONES[self.backbone],
                "batch_size": self.batch_size, "max_steps": self.steps, "eval_steps": self.eval_steps,
                "log_steps": 10, "save_steps": SAVE_STEPS, "seed": self.seed, "select_on": "retrieval",
                "select_data": str(SCIFACT), "select_split": "train", "select_docs": self.select_docs,
                "precision": "auto", "positives": self.positives,
                **({} if self.learning_rate is None else {"learning_rate": self.learning_rate}),
                **({} if self.mix_lambda is None else {"lam": self.mix_lambda})}


def run_of(record: dict) -> Run:
    """The run a record came from: a setting it lacks takes its default (``select_docs: null``: the library's)."""
    from mixcse.evaluation.retrieval import DEFAULT_DISTRACTORS

    fields = {f: record[f] for f in Run.__dataclass_fields__ if record.get(f) is not None}
    if "select_docs" in record and record["select_docs"] is None:
        fields["select_docs"] = DEFAULT_DISTRACTORS
    return Run(**fields)


def test_scores(model, data, **load) -> dict:
    """Retrieval scores (numbers only) on ``data`` (the whole corpus) of a model folder or an encoder."""
    from mixcse.evaluation.retrieval import evaluate_retrieval
    from mixcse.sentence_encoder import SentenceEncoder

    encoder = SentenceEncoder.load(str(model), device="cpu", **load) if isinstance(model, (str, Path)) else model
    return {k: v for k, v in evaluate_retrieval(encoder, data, batch_size=32).items() if isinstance(v, (int, float))}


def retrieval_run(run: Run, out: Path, test_data, zero: dict, args) -> dict:
    """Train ``run`` (selection on the train claims), score its kept model on the test claims; its record."""
    from mixcse.training.rundir import candidate_path

    result, resumed = train_mixcse({**run.train_config(), "save_candidates": args.test_curve or args.test_last}, out)
    log = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    t0 = time.perf_counter()
    test = dict(zero) if result.best_step == 0 else test_scores(out / "best", test_data)  # step 0: the start
    record = {**asdict(run), "code": common.code_version(), "machine": common.machine_info(),
              "selected_step": result.best_step, "start_won": result.best_step == 0,
              "dev": {"metric": result.select_metric, "start": result.raw_dev, "selected": result.best_dev,
                      "curve": [[r["step"], r[result.select_metric]] for r in log if result.select_metric in r]},
              "test": test, "loss_curve": [[r["step"], r["loss"], r["simcse_loss"]] for r in log if "loss" in r],
              # after a resume, train_seconds still covers every step; train_wall_seconds only this invocation
              "train_seconds": result.train_seconds, "train_wall_seconds": result.wall_seconds,
              **({} if resumed is None else {"resumed_at_step": resumed}),
              "test_eval_seconds": time.perf_counter() - t0, "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    if args.test_curve or args.test_last:  # candidates on the test claims (the start: zero-shot; the kept: test)
        t0, points = time.perf_counter(), []
        for step in [s for s, _ in record["dev"]["curve"]] if args.test_curve else [result.steps]:
            points.append({"step": step, **(zero if step == 0 else test if step == result.best_step
                                            else test_scores(candidate_path(out, step), test_data))})
        if args.test_curve:
            record["test_curve"] = [{k: p[k] for k in ("step", *METRICS)} for p in points]
            record["test_curve_seconds"] = time.perf_counter() - t0
        record["test_last_step"] = record["test_curve"][-1] if args.test_curve else points[-1]
        shutil.rmtree(out / "candidates")
    return record


def text_of(r: dict) -> str:
    """What a run trained on (a segmentation or a kind of pairs) and every setting not at its default."""
    positives = r.get("positives", "dropout")
    text = r["segment"] if positives == "dropout" else f"{positives} pairs"
    for name, key in (("lr", "learning_rate"), ("λ", "mix_lambda"), ("length", "max_length")):
        text += f", {name} {r[key]:g}" if r.get(key) is not None else ""
    text += f", batch {r['batch_size']}" if r["batch_size"] != DEFAULT_BATCH else ""
    select_docs = run_of(r).select_docs
    return text + (f", selection sub-corpus +{select_docs}" if select_docs != DEFAULT_SELECT_DOCS else "")


def measures(r: dict) -> dict:
    """What a row compares across seeds: the test scores, and how far training moved the selection metric (at the
    run's last step, minus the start model's), whichever checkpoint was kept."""
    return {**{m: r["test"][m] for m in METRICS}, "selection_change": r["dev"]["curve"][-1][1] - r["dev"]["start"]}


def summarise(zero: dict, runs: list[dict]) -> list[dict]:
    """One row per setting: means over seeds, and differences paired by seed with zero-shot, with SimCSE and (the
    ablations) with MixCSE."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault((r["backbone"], text_of(r), r["temperature"], r["steps"], r["eval_steps"], r["preset"]),
                          []).append(r)
    rows = []
    for key, group in sorted(groups.items()):
        backbone, preset = key[0], key[-1]
        refs = [(ref, {r["seed"]: measures(r) for r in groups[key[:-1] + (ref,)]}) for ref, wanted in
                (("simcse", preset != "simcse"), ("mixcse", preset.startswith("mixcse-")))
                if wanted and key[:-1] + (ref,) in groups]
        row = dict(zip(("backbone", "segment", "temperature", "steps", "eval_steps", "preset"), key))
        by_seed = {r["seed"]: measures(r) for r in group}
        row["seeds"] = sorted(by_seed)
        for name in (*METRICS, "selection_change"):
            mine = {seed: values[name] for seed, values in by_seed.items()}
            if name == "selection_change":
                row["start_won"] = sum(r["start_won"] for r in group)
            row[name if name in METRICS else "selection_change_at_last_step"] = mean_std(list(mine.values()))
            if name in zero.get(backbone, {}):
                row[f"{name}_vs_zero_shot"] = paired(mine, dict.fromkeys(mine, zero[backbone][name]))
            for ref, other in refs:
                row[f"{name}_vs_{ref}"] = paired(mine, {seed: values[name] for seed, values in other.items()})
        tails = [[loss for _, loss, _ in r["loss_curve"][-LOSS_TAIL:]] for r in group]
        row["loss_at_end"] = mean_std([sum(tail) / len(tail) for tail in tails])
        last = [r["test_last_step"]["ndcg@10"] for r in group if r.get("test_last_step")]
        row["ndcg@10_last_step"] = {"n": len(last), "mean_std": mean_std(last)} if last else None
        rows.append(row)
    return rows


def render_retrieval(zero: dict, rows: list[dict]) -> str:
    lines = ["# Domain adaptation on SciFact: measured results", "",
             "Generated by `python -m benchmarks.domain retrieval --report-only` from "
             "benchmarks/results/domain_adaptation.json; the method and the advice are in "
             "[domain-adaptation.md](domain-adaptation.md).", "",
             "Test split (300 claims, whole corpus), x100. Selected on nDCG@10 of the train claims (sub-corpus). "
             "Differences are paired by seed: mean ± std (seeds up, down of n; one-sample t-test p). "
             "\"selection Δ at last step\": the selection metric (train claims) at the run's last step minus the "
             "start model's, whichever checkpoint was kept: how far training moved it (ablations also against "
             "MixCSE). \"loss at end\": the mean of the "
             f"last {LOSS_TAIL} logged training losses (each one batch's), mean ± std over seeds. \"last step's "
             "nDCG@10\": the test score of the last step's model, kept or not (runs with `--test-last` or "
             "`--test-curve`): what shipping without selection would have given.", "",
             "| backbone | zero-shot nDCG@10 | zero-shot recall@100 |", "|---|---:|---:|"]
    lines += [f"| {backbone} | {z['ndcg@10']:.2f} | {z['recall@100']:.2f} |" for backbone, z in zero.items()]
    lines += ["", "| backbone | text | τ | steps | selection every | preset | seeds | nDCG@10 | vs zero-shot "
              "| vs SimCSE | recall@100 | vs zero-shot | start model kept | selection Δ at last step | loss at end "
              "| last step's nDCG@10 (n) |",
              "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        change = fmt(r["selection_change_at_last_step"], "+")
        for ref, name in (("simcse", "SimCSE"), ("mixcse", "MixCSE")):
            if r.get(f"selection_change_vs_{ref}"):
                change += f"; vs {name} {fmt_diff(r[f'selection_change_vs_{ref}'])}"
        loss_m, loss_sd = r["loss_at_end"]
        loss = f"{loss_m:.2g}" + ("" if math.isnan(loss_sd) else f" ± {loss_sd:.1g}")
        last = r.get("ndcg@10_last_step")
        last = f"{fmt(last['mean_std'])} ({last['n']})" if last else "–"
        lines.append(f"| {r['backbone']} | {r['segment']} | {r['temperature']:g} | {r['steps']} | {r['eval_steps']} | "
                     f"{r['preset']} | {len(r['seeds'])} | {fmt(r['ndcg@10'])} | "
                     f"{fmt_diff(r.get('ndcg@10_vs_zero_shot'))} | {fmt_diff(r.get('ndcg@10_vs_simcse'))} | "
                     f"{fmt(r['recall@100'])} | {fmt_diff(r.get('recall@100_vs_zero_shot'))} | "
                     f"{r['start_won']}/{len(r['seeds'])} | {change} | {loss} | {last} |")
    lines += ["", "Published context (GPL paper, msmarco-distilbert start — another model; nDCG@10): "
              + ", ".join(f"{k} {v}" for k, v in PUBLISHED.items()) + ".", ""]
    return "\n".join(lines)


def plot_retrieval(zero: dict, runs: list[dict], path: Path) -> None:
    """Per backbone: the selection metric over steps (every run; dot = kept), and test nDCG@10 over steps where
    ``--test-curve`` measured it (else start -> last step where ``--test-last`` did)."""
    plt = pyplot()
    backbones, presets = sorted({r["backbone"] for r in runs}), sorted({r["preset"] for r in runs})
    settings = sorted({(text_of(r), r["temperature"]) for r in runs})  # one line style and marker each
    fig, axes = plt.subplots(2, len(backbones), figsize=(10 * len(backbones), 10), squeeze=False)
    for (top, bottom), backbone in zip(zip(*axes), backbones):
        labelled: set[str] = set()
        for r in sorted((r for r in runs if r["backbone"] == backbone), key=lambda r: r["preset"]):
            index = settings.index((text_of(r), r["temperature"]))
            style = dict(color=f"C{presets.index(r['preset'])}", alpha=0.8, markersize=3, marker="os^vDx+*"[index % 8],
                         linestyle=("-", "--", ":", "-.", (0, (5, 1, 1, 1)))[index % 5])
            setting = f"{r['preset']} {text_of(r)} τ={r['temperature']:g}"
            top.plot(*zip(*r["dev"]["curve"]), label=None if setting in labelled else setting, **style)
            labelled.add(setting)
            top.scatter([r["selected_step"]], [r["dev"]["selected"]], color="k", s=12, zorder=3)
            curve, last = r.get("test_curve"), r.get("test_last_step")
            if not curve and last and backbone in zero:
                curve = [{"step": 0, "ndcg@10": zero[backbone]["ndcg@10"]}, last]
            if curve:
                bottom.plot([p["step"] for p in curve], [p["ndcg@10"] for p in curve],
                            label=f"{setting} seed {r['seed']}", **style)
        top.set_title(f"{backbone}: selection nDCG@10 (train claims, sub-corpus); dot = kept")
        bottom.set_title(f"{backbone}: test nDCG@10 (test claims, whole corpus) over steps")
        for ax in (top, bottom):
            ax.set(xlabel="step", ylabel="nDCG@10 x100")
            if ax.get_lines():
                ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: curves stay visible
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def retrieval_plan(args, zero: dict, runs: list[dict], save) -> None:
    """Zero-shot scores of each backbone, then every run of the plan that no record holds yet."""
    from mixcse.evaluation.retrieval import load_beir

    test_data = load_beir(SCIFACT, "test")
    for backbone in args.backbones:
        if backbone not in zero:
            t0 = time.perf_counter()
            pooler = None if backbone == "minilm" else "cls_before_pooler"
            zero[backbone] = {**test_scores(common.backbone_path(backbone), test_data, pooler=pooler),
                              "seconds": time.perf_counter() - t0}
            save()
        print(f"zero-shot {backbone}: " + ", ".join(f"{m} {zero[backbone][m]:.2f}" for m in METRICS), flush=True)
        presets = args.presets or ["simcse", "mixcse"] + ["mixcse-single", "mixcse-wo-sg"] * (backbone == "minilm")
        todo = [Run(backbone, preset, seed, segment, tau, args.steps, args.batch_size, args.eval_steps,
                    args.select_docs, args.positives, args.learning_rate, args.lam, args.max_length)
                for segment in args.segments for tau in args.temperatures for seed in args.seeds for preset in presets]
        run_missing([(run.key, run) for run in todo], runs, lambda r: run_of(r).key,
                    lambda run, out: retrieval_run(run, out, test_data, zero[backbone], args), save)


def retrieval(args) -> None:
    path = args.results or common.RESULTS / "domain_adaptation.json"
    results = json.loads(path.read_text()) if path.is_file() else {"zero_shot": {}, "runs": []}
    zero, runs = results["zero_shot"], results["runs"]
    data = "BEIR SciFact (../shared/data/domain/scifact)"
    save = lambda: write(path, "domain_adaptation", {  # noqa: E731
        "machine": common.machine_info(), "zero_shot": zero, "summary": summarise(zero, runs), "runs": runs,
        "published_gpl": PUBLISHED, "data": data}, args.command)
    if not args.report_only:
        retrieval_plan(args, zero, runs, save)
    save()
    table = render_retrieval(zero, summarise(zero, runs))
    (args.docs / "domain_adaptation_results.md").write_text(table)
    if runs:
        plot_retrieval(zero, runs, args.docs / "domain_adaptation.png")
    print(table)


# ------------------------------------------------------------------------------------------------ similarity
MIXCSE_METHODS = ("simcse", "mixcse", "mixcse-single", "mixcse-wo-sg")
METHODS = MIXCSE_METHODS + ("tsdae", "ct", "mnrl", "mnrl-hard")
SCORES = ("mqp_dev_ap", "mqp_test_ap", "rqe_test_ap", "stsb_test")
# the shared recipe of every row (mixcse config keys; the sentence-transformers rows map them onto their trainer)
DEFAULTS = {"max_steps": 200, "batch_size": 64, "learning_rate": 1e-5, "max_seq_length": 32, "temperature": 0.05,
            "eval_steps": 50}


def settings_key(settings: dict) -> str:
    return ",".join(f"{k}={settings[k]}" for k in sorted(settings) if DEFAULTS.get(k) != settings[k]) or "recipe"


def similarity_key(method: str, settings: dict, seed: int) -> str:
    return f"{method}|{settings_key(settings)}|seed{seed}"


def similarity_scores(model) -> dict:
    """MQP dev / test AP, RQE test AP and STS-B test Spearman (x100) of a model folder."""
    from mixcse.evaluation import evaluate

    results = evaluate(str(model), ["STSBenchmark", "pairs"], data_dir=common.DOWNSTREAM,
                       pairs_data=list(PAIRS.values()), batch_size=128, verbose=False)
    return {**{f"{name}_ap": r["ap"] for name, r in zip(PAIRS, results["pairs"].values())},
            "stsb_test": results["sts"]["STSBenchmark"]["spearman"]}


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


def train_sentence_transformers(method: str, settings: dict, seed: int, out: Path) -> int:
    """The baseline through sentence-transformers' own trainer: mixcse's rows' steps, batch, learning rate, length
    and checkpoint selection (the dev-pair AP at the model's inference length); the kept model in out/best. Returns
    the kept step."""
    import torch
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer.training_args import SentenceTransformerTrainingArguments
    from transformers import TrainerCallback, set_seed

    from mixcse.evaluation.selection import PairsSelector

    set_seed(seed)
    texts = [t.strip() for t in (DATA / "unlabeled.txt").read_text(encoding="utf-8").splitlines() if t.strip()]
    model = SentenceTransformer(common.minilm_path(), device="cuda" if torch.cuda.is_available() else "cpu")
    data, loss = st_data_and_loss(method, model, texts, seed, 1.0 / settings["temperature"])
    selector, inference_length, best = PairsSelector(PAIRS["mqp_dev"]), model.max_seq_length, {"ap": -1.0}

    def select(step: int) -> None:
        model.eval()
        model.max_seq_length = inference_length
        ap = selector(lambda s: model.encode(s, batch_size=128, normalize_embeddings=True)).score
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


def similarity_run(method: str, settings: dict, seed: int, out: Path) -> dict:
    """Train one row into ``out``, score its kept model; its record (with the cost and where it ran)."""
    import resource

    import torch

    from mixcse.training.trainer import cpu_supports_bf16

    t0 = time.perf_counter()
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    if method in MIXCSE_METHODS:
        config = {"model": common.minilm_path(), "train_file": str(DATA / "unlabeled.txt"), "segment": "line",
                  "seed": seed, "loss": method, "pooler": "avg", "select_on": "pairs",
                  "select_data": str(PAIRS["mqp_dev"]), "precision": "auto", **settings}
        best_step = train_mixcse(config, out)[0].best_step
    else:
        shutil.rmtree(out, ignore_errors=True)  # no resume: a cut-off run starts again
        best_step = train_sentence_transformers(method, settings, seed, out)
    record = {"method": method, "seed": seed, "settings": dict(settings), "key": similarity_key(method, settings, seed),
              **similarity_scores(out / "best"), "best_step": best_step,
              "seconds": round(time.perf_counter() - t0, 1),
              "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if torch.cuda.is_available():
        record["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    cpu = f"{common.cpu_model()} ({os.cpu_count()} vCPU), {'bf16 autocast' if cpu_supports_bf16() else 'fp32'}"
    record["machine"] = f"{torch.cuda.get_device_name(0)}, bf16 autocast" if torch.cuda.is_available() else cpu
    return record


def similarity_isolated(run: tuple, out: Path, in_process: bool) -> dict:
    """``similarity_run`` in a spawned process: its own peak RSS, nothing carried between rows. ``in_process``
    saves the process start (seconds a row on a GPU); then peak RSS is the whole process's and is not recorded."""
    import multiprocessing

    if in_process:
        return {**similarity_run(*run, out), "peak_rss_mb": None}
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(similarity_run, (*run, out))


def similarity_rows(results: dict) -> list[dict]:
    """Per method: mean ± std of every score over seeds, the mean cost per kind of machine, and the test AP paired
    by seed with SimCSE's and TSDAE's."""
    by_method: dict[str, list[dict]] = {}
    for r in sorted(results["runs"], key=lambda r: r["seed"]):
        by_method.setdefault(r["method"], []).append(r)
    test = {method: {r["seed"]: r["mqp_test_ap"] for r in runs} for method, runs in by_method.items()}
    rows = []
    for method in [m for m in METHODS if m in by_method]:
        runs = by_method[method]
        row = {"method": method, "seeds": len(runs), **{s: mean_std([r[s] for r in runs]) for s in SCORES},
               "above": sum(r["mqp_test_ap"] > results["zero_shot"]["mqp_test_ap"] for r in runs)}
        for metric in ("seconds", "peak_gpu_mb", "peak_rss_mb"):  # costs differ by machine: kept apart
            per: dict[str, list[float]] = {}
            for r in runs:
                if r.get(metric) is not None:
                    kind = "GPU" if "NVIDIA" in r.get("machine", "") or "GPU" in r.get("machine", "") else "CPU"
                    per.setdefault(kind, []).append(r[metric])
            row[metric] = {m: sum(v) / len(v) for m, v in per.items()}
        row.update({f"vs_{o}": paired(test[method], test[o]) for o in ("simcse", "tsdae") if o != method and o in test})
        rows.append(row)
    return rows


def render_similarity(results: dict) -> str:
    from mixcse.utils.tables import markdown_table

    zs, rows = results["zero_shot"], []
    for row in similarity_rows(results):
        vs = [f"{d['mean']:+.2f}" + ("" if d["p"] is None else f" (p = {d['p']:.2g})") if d and d["n"] > 1 else "–"
              for d in (row.get("vs_simcse"), row.get("vs_tsdae"))]
        seconds = ", ".join(f"{v:.0f} ({m})" for m, v in sorted(row["seconds"].items())) or "–"
        memory = ", ".join([f"{v:.0f} (GPU)" for v in row["peak_gpu_mb"].values()]
                           + [f"{v:.0f} (CPU RSS)" for v in row["peak_rss_mb"].values()]) or "–"
        rows.append([row["method"], str(row["seeds"]), *(fmt(row[s]) for s in SCORES), seconds, memory,
                     f"{row['above']}/{row['seeds']}", *vs])
    return "\n".join(markdown_table(
        ["method", "seeds", "MQP dev AP", "MQP test AP", "RQE test AP", "STS-B test", "seconds a run",
         "peak memory MB", "seeds above zero-shot (test)", "test vs SimCSE", "test vs TSDAE"],
        [["zero-shot", "–", *(f"{zs[s]:.2f}" for s in SCORES), *["–"] * 5], *rows]))


def render_sweep(results: dict) -> str:
    from mixcse.utils.tables import markdown_table

    return "\n".join(markdown_table(
        ["method", "settings", "seed", "MQP dev AP", "MQP test AP", "RQE test AP", "STS-B test", "best step"],
        [[r["method"], settings_key(r["settings"]), str(r["seed"]), *(f"{r[s]:.2f}" for s in SCORES),
          str(r["best_step"])] for r in sorted(results["sweep"], key=lambda r: (r["method"], r["key"]))]))


def plot_similarity(results: dict, path: Path) -> None:
    plt = pyplot()
    rows, zero = similarity_rows(results), results["zero_shot"]["mqp_test_ap"]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for i, row in enumerate(rows):
        seeds = [r["mqp_test_ap"] for r in results["runs"] if r["method"] == row["method"]]
        ax.bar(i, row["mqp_test_ap"][0], color="#4c72b0" if row["method"] in MIXCSE_METHODS else "#999999")
        ax.plot([i] * len(seeds), seeds, "k.", ms=4)
    ax.axhline(zero, color="#c44e52", ls="--", label="zero-shot")
    ax.set_xticks(range(len(rows)), [r["method"] for r in rows], rotation=20)
    ax.set_ylim(min([r["mqp_test_ap"] for r in results["runs"]] + [zero]) - 0.5, None)
    ax.set(ylabel="MQP test AP (x100)", title="all-MiniLM-L6-v2 adapted on unlabeled patient questions "
                                              "(bars: mean; dots: seeds)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def similarity_report(results: dict, docs: Path) -> None:
    recipes = {json.dumps(r["settings"], sort_keys=True): r["settings"] for r in results["runs"]}
    text = ["<!-- generated by python -m benchmarks.domain similarity --report-only from "
            "benchmarks/results/similarity_adaptation.json; do not edit -->", "",
            "# Similarity adaptation: the measured table", "",
            "Machines: " + "; ".join(sorted({r.get("machine", "?") for r in results["runs"] + results["sweep"]}))
            + " (each row's `machine` in the JSON). The table's recipe: "
            + "; ".join(", ".join(f"{k} {v}" for k, v in s.items()) for s in recipes.values()) + ".", "",
            render_similarity(results), ""]
    if results["sweep"]:
        text += ["## Exploration (single seeds)", "", "One setting changed at a time from: "
                 + ", ".join(f"{k} {v}" for k, v in results["recipe"].items()) + ".", "", render_sweep(results), ""]
    (docs / "similarity_adaptation_results.md").write_text("\n".join(text))
    if results["runs"]:
        plot_similarity(results, docs / "similarity_adaptation.png")
    print(render_similarity(results))


def similarity(args) -> None:
    path = args.results or common.RESULTS / "similarity_adaptation.json"
    results = json.loads(path.read_text()) if path.is_file() else {"zero_shot": None, "runs": [], "sweep": []}
    here, machines = common.machine_info(), results.setdefault("machines", [])  # every machine that added a row
    if not any(m.get("gpu") == here.get("gpu") and m.get("cpu") == here.get("cpu") for m in machines):
        machines.append(here)
    save = lambda: write(path, "similarity_adaptation", {  # noqa: E731
        **{k: results[k] for k in ("zero_shot", "runs", "sweep")}, "recipe": DEFAULTS, "code": common.code_version(),
        "machines": machines}, args.command)
    if not args.report_only:
        base = {**DEFAULTS, **args.set}
        sweep = [r for r in results["sweep"] if r["method"] == "mixcse"]
        if args.best_of_sweep and sweep:
            base = max(sweep, key=lambda r: r["mqp_dev_ap"])["settings"]
            print(f"recipe from the sweep's best dev AP: {settings_key(base)}", flush=True)
        if results["zero_shot"] is None:
            results["zero_shot"] = similarity_scores(common.minilm_path())
            save()
        grid = [dict(zip(args.grid, values)) for values in itertools.product(*args.grid.values())]
        todo = [(m, {**base, **g}, s) for g in grid for m in args.methods for s in args.seeds]
        run_missing([(similarity_key(*run), run) for run in todo], results["sweep" if args.grid else "runs"],
                    lambda r: r["key"], lambda run, out: similarity_isolated(run, out, args.in_process), save)
    similarity_report(results, args.docs)


# ------------------------------------------------------------------------------------------------ main job
def main_job(args) -> None:
    import resource

    with tempfile.TemporaryDirectory(prefix="main-job-") as tmp:
        out = Path(tmp) / "run"
        overrides = [f"{k}={v}" for k, v in args.set.items()]
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "mixcse", "train", MAIN_JOB_RECIPE, f"output_dir={out}",
                               *overrides], cwd=common.REPO, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if done.returncode:
            print(done.stderr[-3000:], file=sys.stderr)
            raise SystemExit(done.returncode)
        summary = json.loads((out / "summary.json").read_text())
    report = [line for line in done.stdout.splitlines() if line.startswith(("start ", "held-out", "next:"))]
    write(args.results or common.RESULTS / "main_job.json", "main_job", {
        "machine": common.machine_info(), "recipe": MAIN_JOB_RECIPE, "wall_seconds": round(wall, 1), "summary": summary,
        "report": report, "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)},
          args.command)
    print("\n".join(report) + f"\nwall {wall:.0f} s")


# ------------------------------------------------------------------------------------------------ CLI
def settings(items: list[str], *, several: bool = False) -> dict:
    """KEY=VALUE items (``several``: KEY=V1,V2) as {key: value or [values]}, numbers parsed."""
    out = {}
    for item in items:
        key, eq, raw = item.partition("=")
        if not key or not eq or not raw:
            raise ValueError(f"{item!r} is not KEY=VALUE")
        values = [json.loads(v) if v[:1].isdigit() or v[:1] in "-[" else v for v in raw.split(",")]
        out[key] = values if several else values[0]
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.domain", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="bench", required=True)
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--results", type=Path, help="the results JSON (default: benchmarks/results/NAME.json)")
    shared.add_argument("--docs", type=Path, default=DOCS, help="where the generated table and figure go")
    shared.add_argument("--report-only", action="store_true", help="no training: the outputs from the JSON")
    shared.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    r = sub.add_parser("retrieval", parents=[shared], help="SciFact retrieval")
    r.add_argument("--backbones", nargs="+", choices=BACKBONES, default=list(BACKBONES))
    r.add_argument("--presets", nargs="+", help="default: simcse mixcse (+ mixcse-single mixcse-wo-sg on minilm)")
    r.add_argument("--segments", nargs="+", choices=SEGMENT_LENGTH, default=list(SEGMENT_LENGTH))
    r.add_argument("--temperatures", nargs="+", type=float, default=[0.05])
    for flag, default in (("--steps", 200), ("--batch-size", DEFAULT_BATCH), ("--eval-steps", DEFAULT_EVAL_STEPS),
                          ("--select-docs", DEFAULT_SELECT_DOCS), ("--max-length", None)):
        r.add_argument(flag, type=int, default=default)
    r.add_argument("--positives", default="dropout", choices=("dropout", "neighbours", "title"))
    r.add_argument("--learning-rate", type=float, help="default: the backbone's")
    r.add_argument("--lam", type=float, help="MixCSE's λ; default: the preset's (0.2)")
    r.add_argument("--test-last", action="store_true", help="also score the last step's model on the test claims")
    r.add_argument("--test-curve", action="store_true", help="score every evaluated checkpoint on the test claims")
    s = sub.add_parser("similarity", parents=[shared], help="medical-question pairs, against sentence-transformers")
    s.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    s.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="recipe changes for every row")
    s.add_argument("--grid", nargs="+", default=[], metavar="KEY=V1,V2", help="a sweep: the values to try")
    s.add_argument("--best-of-sweep", action="store_true", help="the recipe of the sweep's best MQP dev AP")
    s.add_argument("--in-process", action="store_true", help="no process per row (no peak RSS): GPU machines")
    m = sub.add_parser("main-job", help="the README's main job, timed")
    m.add_argument("--results", type=Path, help="default: benchmarks/results/main_job.json")
    m.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="recipe changes (mixcse train's)")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = parser()
    args = ap.parse_args(argv)
    args.command = " ".join(["python -m benchmarks.domain", *argv])
    from mixcse import PRESETS

    if getattr(args, "presets", None) and set(args.presets) - set(PRESETS):
        ap.error(f"argument --presets: choose from {', '.join(PRESETS)}")
    try:
        args.set, args.grid = settings(getattr(args, "set", [])), settings(getattr(args, "grid", []), several=True)
    except ValueError as e:
        ap.error(str(e))
    {"retrieval": retrieval, "similarity": similarity, "main-job": main_job}[args.bench](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
