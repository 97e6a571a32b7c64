"""Domain adaptation on BEIR SciFact: does unsupervised SimCSE / MixCSE on the target documents help retrieval?

    python benchmarks/domain_adaptation.py                       # the default plan (long: see the docstring's table)
    python benchmarks/domain_adaptation.py --backbones minilm --presets simcse,mixcse --seeds 0 --segments sentence
    python benchmarks/domain_adaptation.py --report-only         # JSON, table and figure from the cached runs

Protocol: the training text is the SciFact corpus itself (5,183 abstracts), read by mixcse's document reader as
sentences or as passages; checkpoints are selected on nDCG@10 of the ``train`` qrels over a fixed, seeded
sub-corpus (``select_on: retrieval``; the start model is a candidate); the selected model is scored on the ``test``
qrels over the whole corpus (nDCG@10, recall@100, documents "title text" at the model's inference length).
Zero-shot rows are the start models scored the same way.

Every finished run is cached in benchmarks/cache/domain/<key>/record.json (with its run directory), so an
interrupted benchmark resumes where it stopped and ``--report-only`` rebuilds the outputs at once; a run cut off
mid-training continues from its last checkpoint (every ``SAVE_STEPS`` steps; mixcse's resume is exact), which
matters for passages (over an hour per run on 2 cores). Outputs:
benchmarks/results/domain_adaptation.json, docs/domain_adaptation_results.md and docs/domain_adaptation.png.
The committed JSON holds every record, so into an empty cache (a fresh clone) its runs are restored first: they are
neither re-trained nor dropped from the outputs. To redo a run, delete its cache folder.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.common import REPO, RESULTS, SHARED, backbone_path, code_version, json_safe, machine_info, write_result

SCIFACT = SHARED / "data" / "domain" / "scifact"
CACHE = REPO / "benchmarks" / "cache" / "domain"
RESULTS_FILE = RESULTS / "domain_adaptation.json"
DOCS = REPO / "docs"
METRICS = ("ndcg@10", "recall@100")
# Per backbone: how it is trained. MiniLM keeps its own mean pooling and a small learning rate (it is already
# contrastively trained); the stand-in is trained as the paper trains BERT ([CLS] + MLP at train time).
BACKBONES = {
    "minilm": {"pooler": "avg", "learning_rate": 1e-5},
    "standin": {"pooler": "cls", "learning_rate": 3e-5},
}
SEGMENT_LENGTH = {"sentence": 64, "passage": 256}  # training max_seq_length per segmentation
PUBLISHED = {  # GPL paper (Wang et al., 2022), SciFact nDCG@10, msmarco-distilbert start: context, another model
    "zero-shot": 57.1, "SimCSE": 55.0, "CT": 55.6, "MLM": 60.0, "TSDAE": 62.8, "GPL": 65.2}


DEFAULT_BATCH = 64
DEFAULT_EVAL_STEPS = 50
DEFAULT_SELECT_DOCS = 500  # the selection sub-corpus: the train claims' relevant abstracts + 500 others
LOSS_TAIL = 5  # "loss at the end": the mean of the last LOSS_TAIL logged losses (each is one batch's)
SAVE_STEPS = 10  # checkpoint cadence: what an interrupted run loses at most (saving does not change training)


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
        """The cache folder's name: every setting, those left at their defaults omitted."""
        pairs = "" if self.positives == "dropout" else f"-{self.positives}"
        optional = (("lr", self.learning_rate), ("lam", self.mix_lambda), ("len", self.max_length),
                    ("every", None if self.eval_steps == DEFAULT_EVAL_STEPS else self.eval_steps),
                    ("docs", None if self.select_docs == DEFAULT_SELECT_DOCS else self.select_docs))
        extra = "".join(f"-{name}{value:g}" for name, value in optional if value is not None)
        return (f"{self.backbone}-{self.preset}-{self.segment}{pairs}-t{self.temperature:g}-s{self.steps}"
                f"-b{self.batch_size}{extra}-seed{self.seed}")

    def train_config(self, out: Path, threads: int | None) -> dict:
        return {"model": backbone_path(self.backbone), "train_file": str(SCIFACT / "corpus.jsonl"),
                "output_dir": str(out), "loss": self.preset, "temperature": self.temperature,
                "segment": self.segment, "max_seq_length": self.max_length or SEGMENT_LENGTH[self.segment],
                **BACKBONES[self.backbone],
                "batch_size": self.batch_size, "max_steps": self.steps, "eval_steps": self.eval_steps,
                "log_steps": 10, "save_steps": SAVE_STEPS, "seed": self.seed, "select_on": "retrieval",
                "select_data": str(SCIFACT), "select_split": "train", "select_docs": self.select_docs,
                "precision": "auto", "positives": self.positives, "num_threads": threads,
                **({} if self.learning_rate is None else {"learning_rate": self.learning_rate}),
                **({} if self.mix_lambda is None else {"lam": self.mix_lambda})}


def run_of(record: dict) -> Run:
    """The run a record came from (a setting a record lacks takes its default; ``select_docs: null`` meant the
    library's default sub-corpus)."""
    from mixcse.evaluation.retrieval import DEFAULT_DISTRACTORS

    fields = {f: record[f] for f in Run.__dataclass_fields__ if record.get(f) is not None}
    if "select_docs" in record and record["select_docs"] is None:
        fields["select_docs"] = DEFAULT_DISTRACTORS
    return Run(**fields)


def restore_cache(results: Path = RESULTS_FILE) -> int:
    """Fill an empty cache with the records of the committed results; how many were written. A cache that holds
    any record is left as it is, so a deleted run stays deleted (and is trained again when asked for)."""
    if not results.exists() or any(CACHE.glob("*/record.json")):
        return 0
    published = json.loads(results.read_text())
    files = [(CACHE / f"zero-shot-{backbone}.json", record)
             for backbone, record in published.get("zero_shot", {}).items()]
    files += [(CACHE / run_of(record).key / "record.json", record) for record in published.get("runs", [])]
    written = 0
    for path, record in files:
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record, indent=2) + "\n")
            written += 1
    return written


def test_scores(encoder, data) -> dict:
    """The encoder's retrieval scores on ``data`` (the whole corpus), numbers only."""
    from mixcse.evaluation.retrieval import evaluate_retrieval

    scores = evaluate_retrieval(encoder, data, batch_size=32)
    return {k: v for k, v in scores.items() if isinstance(v, (int, float))}


def last_step_test_scores(out: Path, test_data) -> dict:
    """Test scores of the model at the run's last step (its checkpoint), whichever checkpoint selection kept: what
    shipping without selection would have given."""
    from mixcse.sentence_encoder import SentenceEncoder
    from mixcse.training.rundir import checkpoint_path, load_checkpoint

    encoder = SentenceEncoder.load(str(out / "best"), device="cpu")  # architecture, pooler and inference length
    checkpoint = load_checkpoint(checkpoint_path(out))
    # The train-time MLP head ([CLS] + MLP recipes) is not part of a saved model: everything else must match.
    missing, unexpected = encoder.encoder.load_state_dict(checkpoint["model"], strict=False)
    if missing or any(not key.startswith("head.") for key in unexpected):
        raise RuntimeError(f"checkpoint does not fit best/: missing {missing}, unexpected {unexpected}")
    return {"step": checkpoint["state"]["step"], **test_scores(encoder, test_data)}


def test_curve(out: Path, record: dict, test_data, zero: dict) -> list[dict]:
    """Test scores of every candidate selection scored (``save_candidates``): the start's are the zero-shot ones,
    the kept step's are already in the record."""
    from mixcse.sentence_encoder import SentenceEncoder
    from mixcse.training.rundir import candidate_path

    curve = []
    for step, _ in record["dev"]["curve"]:
        if step == 0:
            scores = zero
        elif step == record["selected_step"]:
            scores = record["test"]
        else:
            scores = test_scores(SentenceEncoder.load(str(candidate_path(out, step)), device="cpu"), test_data)
        curve.append({"step": step, **{m: scores[m] for m in METRICS}})
    return curve


def resumable_step(out: Path) -> int | None:
    """The step of the checkpoint an interrupted run left in ``out``, or None (no checkpoint: train from step 0).
    Memory-mapped: only the small state is read, not the weights and optimiser state the trainer loads next."""
    from mixcse.training.rundir import checkpoint_path, load_checkpoint

    if not checkpoint_path(out).exists():
        return None
    return load_checkpoint(checkpoint_path(out), mmap=True)["state"]["step"]


def run_one(run: Run, test_data, zero: dict, threads: int | None, test_last: bool = False,
            curve: bool = False) -> dict:
    import mixcse
    from mixcse.sentence_encoder import SentenceEncoder

    folder = CACHE / run.key
    record_file = folder / "record.json"
    if record_file.exists():
        record = json.loads(record_file.read_text())
        missing = [flag for flag, key, asked in (("--test-curve", "test_curve", curve),
                                                 ("--test-last", "test_last_step", test_last or curve))
                   if asked and key not in record]
        if missing:
            print(f"{run.key}: cached without {' / '.join(missing)}; delete {folder} to train it again with them",
                  flush=True)
        return record
    out = folder / "run"
    resumed_at = resumable_step(out)
    if resumed_at is not None:
        print(f"{run.key}: resuming from its checkpoint at step {resumed_at}", flush=True)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        result = mixcse.train({**run.train_config(out, threads), "save_candidates": curve},
                              overwrite=resumed_at is None, resume=resumed_at is not None)
    train_wall = time.perf_counter() - t0
    log = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    t0 = time.perf_counter()
    # When the start model won the selection, best/ holds its weights: its test scores are the zero-shot ones.
    test = dict(zero) if result.best_step == 0 else test_scores(SentenceEncoder.load(str(out / "best"), device="cpu"),
                                                                 test_data)
    record = {**asdict(run), "code": code_version(), "machine": machine_info(),
              "selected_step": result.best_step, "start_won": result.best_step == 0,
              "dev": {"metric": result.select_metric, "start": result.raw_dev, "selected": result.best_dev,
                      "curve": [[r["step"], r[result.select_metric]] for r in log if result.select_metric in r]},
              "test": test,
              "loss_curve": [[r["step"], r["loss"], r["simcse_loss"]] for r in log if "loss" in r],
              "train_seconds": result.train_seconds, "train_wall_seconds": train_wall,
              # after a resume, train_seconds still covers every step; train_wall_seconds only this invocation
              **({} if resumed_at is None else {"resumed_at_step": resumed_at}),
              "test_eval_seconds": time.perf_counter() - t0, "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    if curve:  # test scores over steps; the last step's among them
        t0 = time.perf_counter()
        record["test_curve"] = test_curve(out, record, test_data, zero)
        record["test_curve_seconds"] = time.perf_counter() - t0
        record["test_last_step"] = record["test_curve"][-1]
        shutil.rmtree(out / "candidates")
    elif test_last:  # when selection kept the last step, its test scores are already there
        record["test_last_step"] = ({"step": result.steps, **record["test"]} if result.best_step == result.steps
                                    else last_step_test_scores(out, test_data))
    folder.mkdir(parents=True, exist_ok=True)
    record_file.write_text(json.dumps(record, indent=2) + "\n")
    shutil.rmtree(out / "checkpoint", ignore_errors=True)  # keep best/ (for later evaluations), not the optimiser
    return record


def zero_shot(backbone: str, test_data) -> dict:
    path = CACHE / f"zero-shot-{backbone}.json"
    if path.exists():
        return json.loads(path.read_text())
    from mixcse.sentence_encoder import SentenceEncoder

    pooler = None if backbone == "minilm" else "cls_before_pooler"
    t0 = time.perf_counter()
    record = test_scores(SentenceEncoder.load(backbone_path(backbone), pooler=pooler, device="cpu"), test_data)
    record["seconds"] = time.perf_counter() - t0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    return record


# ------------------------------------------------------------------------------------------------ report
def mean_std(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    return m, (math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else float("nan"))


def paired(a: dict, b: dict, metric: str) -> dict | None:
    """Differences a - b over the seeds both have; t-test when there are at least two."""
    from scipy import stats

    seeds = sorted(set(a) & set(b))
    if not seeds:
        return None
    diffs = [a[s][metric] - b[s][metric] for s in seeds]
    m, sd = mean_std(diffs)
    p = float(stats.ttest_1samp(diffs, 0.0).pvalue) if len(diffs) > 1 and sd > 0 else None
    return {"mean": m, "std": sd, "n": len(diffs), "p": p, "wins": sum(d > 0 for d in diffs),
            "losses": sum(d < 0 for d in diffs)}


def text_of(r: dict) -> str:
    """What a run trained on: a segmentation, or a kind of pairs (``positives``), and every setting that is not the
    default (a learning rate when not the backbone's)."""
    positives = r.get("positives", "dropout")
    text = r["segment"] if positives == "dropout" else f"{positives} pairs"
    for name, key in (("lr", "learning_rate"), ("λ", "mix_lambda"), ("length", "max_length")):
        text += f", {name} {r[key]:g}" if r.get(key) is not None else ""
    text += f", batch {r['batch_size']}" if r["batch_size"] != DEFAULT_BATCH else ""
    select_docs = run_of(r).select_docs
    return text + (f", selection sub-corpus +{select_docs}" if select_docs != DEFAULT_SELECT_DOCS else "")


def summarise(zero: dict, runs: list[dict]) -> list[dict]:
    groups: dict[tuple, dict[int, dict]] = {}
    won: dict[tuple, int] = {}
    dev_change: dict[tuple, dict[int, dict]] = {}  # per seed, as {"change": ...} for ``paired``
    last_test: dict[tuple, list[float]] = {}  # test nDCG@10 of the last step's model, where measured
    loss_end: dict[tuple, list[float]] = {}
    for r in runs:
        key = (r["backbone"], text_of(r), r["temperature"], r["steps"], r["eval_steps"], r["preset"])
        groups.setdefault(key, {})[r["seed"]] = r["test"]
        won[key] = won.get(key, 0) + r["start_won"]
        # The selection metric at the last step minus the start's: how far training moved it, kept or not.
        dev_change.setdefault(key, {})[r["seed"]] = {"change": r["dev"]["curve"][-1][1] - r["dev"]["start"]}
        if r.get("test_last_step"):
            last_test.setdefault(key, []).append(r["test_last_step"]["ndcg@10"])
        tail = [loss for _, loss, _ in r["loss_curve"][-LOSS_TAIL:]]
        loss_end.setdefault(key, []).append(sum(tail) / len(tail))
    rows = []
    for key, by_seed in sorted(groups.items()):
        backbone, segment, tau, steps, every, preset = key
        simcse_key = key[:-1] + ("simcse",)
        mixcse_key = key[:-1] + ("mixcse",)  # the ablations' reference
        ablation = preset.startswith("mixcse-")
        row = {"backbone": backbone, "segment": segment, "temperature": tau, "steps": steps, "eval_steps": every,
               "preset": preset,
               "seeds": sorted(by_seed)}
        for metric in METRICS:
            row[metric] = mean_std([t[metric] for t in by_seed.values()])
            z = zero.get(backbone, {}).get(metric)
            if z is not None:
                row[f"{metric}_vs_zero_shot"] = paired(by_seed, {s: {metric: z} for s in by_seed}, metric)
            simcse = groups.get(simcse_key)
            if preset != "simcse" and simcse:
                row[f"{metric}_vs_simcse"] = paired(by_seed, simcse, metric)
            if ablation and groups.get(mixcse_key):
                row[f"{metric}_vs_mixcse"] = paired(by_seed, groups[mixcse_key], metric)
        row["start_won"] = won[key]
        change = dev_change[key]
        row["selection_change_at_last_step"] = mean_std([c["change"] for c in change.values()])
        simcse_change = dev_change.get(simcse_key)
        if preset != "simcse" and simcse_change:
            row["selection_change_vs_simcse"] = paired(change, simcse_change, "change")
        if ablation and dev_change.get(mixcse_key):
            row["selection_change_vs_mixcse"] = paired(change, dev_change[mixcse_key], "change")
        row["loss_at_end"] = mean_std(loss_end[key])
        last = last_test.get(key)
        row["ndcg@10_last_step"] = {"n": len(last), "mean_std": mean_std(last)} if last else None
        rows.append(row)
    return rows


def _fmt(ms) -> str:
    m, sd = ms
    return f"{m:.2f}" + ("" if math.isnan(sd) else f" ± {sd:.2f}")


def _diff(d) -> str:
    if not d:
        return "–"
    text = (f"{d['mean']:+.2f}" + ("" if math.isnan(d["std"]) else f" ± {d['std']:.2f}")
            + f" ({d['wins']} up, {d['losses']} down of {d['n']}")
    return text + (f", p = {d['p']:.2g})" if d["p"] is not None else ")")


def render(zero: dict, rows: list[dict]) -> str:
    lines = ["# Domain adaptation on SciFact: measured results", "",
             "Generated by `python benchmarks/domain_adaptation.py --report-only` from "
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
    for backbone, z in zero.items():
        lines.append(f"| {backbone} | {z['ndcg@10']:.2f} | {z['recall@100']:.2f} |")
    lines += ["", "| backbone | text | τ | steps | selection every | preset | seeds | nDCG@10 | vs zero-shot "
              "| vs SimCSE | recall@100 | vs zero-shot | start model kept | selection Δ at last step | loss at end "
              "| last step's nDCG@10 (n) |",
              "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        m, sd = r["selection_change_at_last_step"]
        change = f"{m:+.2f}" + ("" if math.isnan(sd) else f" ± {sd:.2f}")
        if r.get("selection_change_vs_simcse"):
            change += f"; vs SimCSE {_diff(r['selection_change_vs_simcse'])}"
        if r.get("selection_change_vs_mixcse"):
            change += f"; vs MixCSE {_diff(r['selection_change_vs_mixcse'])}"
        loss_m, loss_sd = r["loss_at_end"]
        loss = f"{loss_m:.2g}" + ("" if math.isnan(loss_sd) else f" ± {loss_sd:.1g}")
        last = r.get("ndcg@10_last_step")
        last = f"{_fmt(last['mean_std'])} ({last['n']})" if last else "–"
        lines.append(f"| {r['backbone']} | {r['segment']} | {r['temperature']:g} | {r['steps']} | {r['eval_steps']} | "
                     f"{r['preset']} | "
                     f"{len(r['seeds'])} | {_fmt(r['ndcg@10'])} | {_diff(r.get('ndcg@10_vs_zero_shot'))} | "
                     f"{_diff(r.get('ndcg@10_vs_simcse'))} | {_fmt(r['recall@100'])} | "
                     f"{_diff(r.get('recall@100_vs_zero_shot'))} | {r['start_won']}/{len(r['seeds'])} | {change} "
                     f"| {loss} | {last} |")
    lines += ["", "Published context (GPL paper, msmarco-distilbert start — another model; nDCG@10): "
              + ", ".join(f"{k} {v}" for k, v in PUBLISHED.items()) + ".", ""]
    return "\n".join(lines)


LINE_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)))
MARKERS = ("o", "s", "^", "v", "D", "x", "+", "*")  # with LINE_STYLES: 40 settings drawn apart


def plot(zero: dict, runs: list[dict], path: Path) -> None:
    """Per backbone: the selection metric over steps (every run; dot = kept), and test nDCG@10 over steps — the start
    model (zero-shot) and every evaluated checkpoint where ``--test-curve`` measured them, else the last step's
    model where ``--test-last`` did."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    backbones = sorted({r["backbone"] for r in runs})
    presets = sorted({r["preset"] for r in runs})
    settings = sorted({(text_of(r), r["temperature"]) for r in runs})  # one line style each
    fig, axes = plt.subplots(2, len(backbones), figsize=(10 * len(backbones), 10), squeeze=False)
    for col, backbone in enumerate(backbones):
        top, bottom = axes[0][col], axes[1][col]
        labelled: set[str] = set()
        for r in sorted((r for r in runs if r["backbone"] == backbone), key=lambda r: r["preset"]):
            index = settings.index((text_of(r), r["temperature"]))
            style = dict(color=f"C{presets.index(r['preset'])}", alpha=0.8, markersize=3,
                         linestyle=LINE_STYLES[index % len(LINE_STYLES)], marker=MARKERS[index % len(MARKERS)])
            setting = f"{r['preset']} {text_of(r)} τ={r['temperature']:g}"
            label = f"{setting} seed {r['seed']}"
            steps, scores = zip(*r["dev"]["curve"])
            top.plot(steps, scores, label=None if setting in labelled else setting, **style)  # seeds: one entry
            labelled.add(setting)
            top.scatter([r["selected_step"]], [r["dev"]["selected"]], color="k", s=12, zorder=3)
            last = r.get("test_last_step")
            if r.get("test_curve"):
                bottom.plot([p["step"] for p in r["test_curve"]], [p["ndcg@10"] for p in r["test_curve"]],
                            label=label, **style)
            elif last and backbone in zero:
                bottom.plot([0, last["step"]], [zero[backbone]["ndcg@10"], last["ndcg@10"]], label=label, **style)
        top.set_title(f"{backbone}: selection nDCG@10 (train claims, sub-corpus); dot = kept")
        bottom.set_title(f"{backbone}: test nDCG@10 (test claims, whole corpus) over steps")
        for ax in (top, bottom):
            ax.set_xlabel("step")
            ax.set_ylabel("nDCG@10 x100")
            if ax.get_lines():
                ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: curves stay visible
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report() -> None:
    zero = {p.stem.removeprefix("zero-shot-"): json.loads(p.read_text())
            for p in sorted(CACHE.glob("zero-shot-*.json"))}
    runs = [json.loads(p.read_text()) for p in sorted(CACHE.glob("*/record.json"))]
    rows = summarise(zero, runs)
    write_result("domain_adaptation", json_safe({"zero_shot": zero, "summary": rows, "runs": runs,
                                                 "published_gpl": PUBLISHED,
                                                 "data": "BEIR SciFact (../shared/data/domain/scifact)"}))
    (DOCS / "domain_adaptation_results.md").write_text(render(zero, rows))
    if runs:
        plot(zero, runs, DOCS / "domain_adaptation.png")
    print(render(zero, rows))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backbones", default="minilm,standin")
    ap.add_argument("--presets", default=None, help="default: simcse,mixcse (+ mixcse-single,mixcse-wo-sg on MiniLM)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--segments", default="sentence,passage")
    ap.add_argument("--temperatures", default="0.05")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=DEFAULT_BATCH)
    ap.add_argument("--eval-steps", type=int, default=DEFAULT_EVAL_STEPS, help="a selection candidate every N steps")
    ap.add_argument("--select-docs", type=int, default=DEFAULT_SELECT_DOCS,
                    help="abstracts besides the train claims' relevant ones in the selection sub-corpus")
    ap.add_argument("--positives", default="dropout", help="dropout, neighbours or title (docs/domain-adaptation.md)")
    ap.add_argument("--learning-rate", type=float, default=None, help="default: the backbone's (BACKBONES)")
    ap.add_argument("--lam", type=float, default=None, help="MixCSE's λ; default: the preset's (0.2)")
    ap.add_argument("--max-length", type=int, default=None,
                    help="training max_seq_length; default: 64 for sentences, 256 for passages")
    ap.add_argument("--test-last", action="store_true",
                    help="also score the last step's model on the test split (one more whole-corpus evaluation)")
    ap.add_argument("--test-curve", action="store_true",
                    help="score every evaluated checkpoint on the test split (one whole-corpus evaluation each); "
                         "the figure's test curves")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args()
    restored = restore_cache()
    if restored:
        print(f"restored {restored} cached records from {RESULTS_FILE.relative_to(REPO)}")
    if not args.report_only:
        from mixcse.evaluation.retrieval import load_beir

        test_data = load_beir(SCIFACT, "test")
        for backbone in args.backbones.split(","):
            z = zero_shot(backbone, test_data)
            print(f"zero-shot {backbone}: " + ", ".join(f"{m} {z[m]:.2f}" for m in METRICS), flush=True)
            presets = args.presets.split(",") if args.presets else (
                ["simcse", "mixcse"] + (["mixcse-single", "mixcse-wo-sg"] if backbone == "minilm" else []))
            for segment in args.segments.split(","):
                for tau in (float(t) for t in args.temperatures.split(",")):
                    for seed in (int(s) for s in args.seeds.split(",")):
                        for preset in presets:
                            run = Run(backbone, preset, seed, segment, tau, args.steps, args.batch_size,
                                      args.eval_steps, args.select_docs, args.positives, args.learning_rate,
                                      args.lam, args.max_length)
                            t0 = time.perf_counter()
                            rec = run_one(run, test_data, z, args.threads, args.test_last, args.test_curve)
                            print(f"{run.key}: selected step {rec['selected_step']}, test "
                                  + ", ".join(f"{m} {rec['test'][m]:.2f}" for m in METRICS)
                                  + f" ({time.perf_counter() - t0:.0f} s)", flush=True)
    report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
