"""The claims' tables and figures from the committed results of benchmarks.claims: paper_claims.json (the CPU table,
bf16), paper_claims_fp32.json (the same recipes in fp32, both transfer probes), the GPU seed probes, and the batch-size
study (batch_size.json, archived).

Every table is a generated block (BLOCKS; `python -m benchmarks.report`): one row per variant and machine kind, the
start models first, cells mean ± std over seeds, differences paired by seed with a t-test (common.BOLD_RULE), and a
caption naming the machines. `python -m benchmarks.claims report` draws the figures too."""

from __future__ import annotations

import json
import statistics
from functools import partial
from pathlib import Path

from benchmarks.common import (BOLD_RULE, REPO, RESULTS, by_kind, caption, kind_of, pyplot, results_table, value,
                               versus)
from mixcse.evaluation.tasks import STS_TASKS, TRANSFER_TASKS
from mixcse.evaluation.tasks import label as task_label

DOCS = REPO / "docs"
TABLE, FP32, BATCH = "paper_claims.json", "paper_claims_fp32.json", "batch_size.json"
PROBES = {"seeds_probe_gpu.json": "minilm", "seeds_probe_standin_gpu.json": "standin",  # GPU: file -> backbone
          "lambda_probe_gpu.json": "minilm", "steps_probe_gpu.json": "minilm"}
TABLE_BATCH = 64  # the table's batch
RECIPE_STEPS = {"minilm": 200, "standin": 250}  # the table's training steps per backbone
DEFAULT_LAM = 0.2  # every MixCSE preset's own λ
PAPER_PRESETS = ("simcse", "mixcse", "mixcse-single", "mixcse-wo-sg")  # the paper's table; the rest are extras
PYTORCH_FIELD = "transfer_pytorch"  # SentEval's PyTorch probe; "transfer" is sklearn-converged
PROBE_FIELDS = {PYTORCH_FIELD: "SentEval PyTorch probe", "transfer": "sklearn-converged"}
NAMES = {"simcse": "SimCSE", "mixcse": "MixCSE", "mixcse-single": "MixCSE single", "mixcse-wo-sg": "MixCSE wo-sg",
         "mixcse-bound": "MixCSE bound (per-pair λ clip)", "mixcse-released": "MixCSE released-code loss"}
BACKBONES = {"minilm": "A: all-MiniLM-L6-v2 (continued unsupervised training, mean pooling)",
             "standin": "B: stand-in mini-wiki-mlm ([CLS]+MLP at train, [CLS] at test)"}
STARTS = {"minilm-raw": "all-MiniLM-L6-v2 untouched (start model)",  # baseline -> row label, in the tables' order
          "minilm-raw-fp32": "all-MiniLM-L6-v2 untouched, fp32 evaluation",
          "standin-raw-cls": "stand-in untouched, [CLS] (start model)",
          "standin-raw-avg": "stand-in untouched, mean pooling", "glove": "Avg. GloVe (6B, 50-d)"}
START_OF = {"minilm": STARTS["minilm-raw"], "standin": STARTS["standin-raw-cls"]}  # the runs' own start model


def parse_variant(variant: str) -> tuple[str, float | None]:
    """A preset name, optionally with λ ("mixcse:0.5"); None = the preset's own λ."""
    preset, _, lam = variant.partition(":")
    return preset, float(lam) if lam else None


def load_results(path: Path) -> dict:
    """A claims results file (runs, baselines, settings); empty lists when it does not exist yet."""
    return {"runs": [], "baselines": [], **(json.loads(path.read_text()) if path.exists() else {})}


# ------------------------------------------------------------------------------------------------- records
def records(*files: str, batch: bool = False, results: Path | None = None) -> list[dict]:
    """The runs and start models of ``files`` as table records: the file's machine, date, commit, precision and
    provenance where a record has none; "label" its row ("suffix": its steps, or batch and steps with ``batch``,
    when not the recipe's); a (label, machine, seed) once, the first kept; other batches only with ``batch``."""
    out, seen = [], set()
    for name in files:
        data = load_results((results or RESULTS) / name)
        meta = {k: data[k] for k in ("machine", "date", "commit", "precision", "provenance") if k in data}
        for r in data["baselines"] + data["runs"]:
            r = {**meta, "precision": r.get("eval_precision", meta.get("precision")), **r,
                 "backbone": r.get("backbone", PROBES.get(name))}
            if "preset" in r:
                r["preset"], r["lam"] = parse_variant(r["preset"]) if name in PROBES else (r["preset"], r.get("lam"))
                r["suffix"] = (f", batch {r.get('batch_size', TABLE_BATCH)}, {r['steps']} steps" if batch else
                               "" if r["steps"] == RECIPE_STEPS[r["backbone"]] else f", {r['steps']:,} steps")
                lam = "" if r["lam"] in (None, DEFAULT_LAM) else f" λ={r['lam']:g}"
                r["label"] = NAMES.get(r["preset"], r["preset"]) + lam + r["suffix"]
            else:
                r |= {"label": STARTS[r["name"]], "suffix": ""}
            key = (r["label"], r["backbone"], str(r.get("machine")), r.get("seed"))
            if key not in seen and (batch or r.get("batch_size", TABLE_BATCH) == TABLE_BATCH):
                seen.add(key)
                out.append(r)
    return out


def rows(recs: list[dict], backbone: str, keep=lambda r: True) -> list[tuple[str, list[dict]]]:
    """(label, records of one machine kind) of a backbone (GloVe with A): the start models first (its own first),
    then per machine kind the paper's variants, the others, the runs of other lengths."""
    mine = [r for r in recs if keep(r) and r["backbone"] in (backbone, "glove" if backbone == "minilm" else backbone)]
    kinds, starts = list(by_kind(mine)), sorted(STARTS.values(), key=lambda s: s != START_OF.get(backbone))

    def order(r):
        if r["label"] in starts:
            return 0, starts.index(r["label"]), kinds.index(kind_of([r]))
        rank = PAPER_PRESETS.index(r["preset"]) if r["preset"] in PAPER_PRESETS else len(PAPER_PRESETS)
        return 1, kinds.index(kind_of([r])), bool(r["suffix"]), rank, r.get("batch_size", 64), r["steps"], r["label"]

    groups: dict[tuple, list[dict]] = {}
    for r in sorted(mine, key=order):
        groups.setdefault((r["label"], kind_of([r])), []).append(r)
    return [(label, group) for (label, _), group in groups.items()]


def paper(r: dict) -> bool:
    """A run of the paper's variants at their own λ and the recipe's steps."""
    return r.get("preset") in PAPER_PRESETS and r["lam"] in (None, DEFAULT_LAM) and not r["suffix"]


def referenced(rws, preset: str, suffix=None) -> dict[str, str]:
    """label -> the label of ``preset`` with the row's suffix (or ``suffix``), for trained rows where it exists."""
    labels = {label for label, _ in rws}
    return {label: ref for label, recs in rws if "preset" in recs[0]
            and (ref := NAMES[preset] + (recs[0]["suffix"] if suffix is None else suffix)) in labels}


# ------------------------------------------------------------------------------------------------- metrics
def field(name: str, key: str = "avg"):
    """The metric ``record[name][key]`` (None where the record has none)."""
    return lambda r: (r.get(name) or {}).get(key)


def curve_mean(key: str, second_half: bool = True):
    """A logged curve's mean (over the second half of training: what the loss keeps once it has settled)."""
    def metric(r):
        c = r.get("curves") or {}
        xs = [v for s, v in zip(c.get("step") or [], c.get(key) or [])
              if v is not None and (not second_half or s > r["steps"] / 2)]
        return statistics.fmean(xs) if xs else None
    return metric


def start_ahead(label: str, recs: list[dict], find) -> str:
    """Of the runs, how many had the start model above every trained checkpoint on STS-B dev, the selection data:
    `mixcse train`, which weighs the start model, would then have shipped it."""
    pairs = [(r["raw_dev"], r["best_dev"]) for r in recs if r.get("raw_dev") is not None]
    return f"{sum(raw > best for raw, best in pairs)}/{len(pairs)}" if pairs else ""


sts, best_step = field("sts"), value(lambda r: r.get("best_step"), 0)
dev = value(lambda r: r.get("best_dev", r.get("stsb_dev")))  # the selected checkpoint's; a start model's


def probes(recs: list[dict]) -> dict[str, str]:
    """The transfer probes some record has: field -> name."""
    return {f: name for f, name in PROBE_FIELDS.items() if any(r.get(f) for r in recs)}


# --------------------------------------------------------------------------------------------------- tables
def per_backbone(recs: list[dict], keep, columns, bold: bool = True) -> str:
    """A table per backbone of ``columns(rows, backbone)``, each with its caption; the bold rule at the end."""
    out = []
    for bb, title in BACKBONES.items():
        if rws := rows(recs, bb, lambda r: keep(r, bb)):
            out += [f"**{title}**", "", *results_table(rws, columns(rws, bb)), "",
                    caption([r for _, g in rws for r in g]), ""]
    return "\n".join(out + [BOLD_RULE] * bold)


def summary(files: tuple[str, ...], readme: bool = False) -> str:
    """The start models, then the paper's variants at the recipe's steps (README: no fp32-evaluation or GloVe row,
    the sklearn-converged probe only, fewer columns)."""
    recs = records(*files)
    chain = {"MixCSE": "MixCSE single", "MixCSE single": "MixCSE wo-sg"}

    def columns(rws, bb):
        simcse = referenced(rws, "simcse")
        cols = {"STS avg": value(sts), "− SimCSE": versus(sts, simcse), "− start model": versus(sts, START_OF[bb])}
        cols |= {} if readme else {"− next in the ablation (full − single, single − wo-sg)": versus(sts, chain)}
        for f, name in (probes(recs) if not readme else {"transfer": "sklearn-converged"}).items():
            cols |= {f"transfer avg, {name}": value(field(f)), f"transfer − SimCSE, {name}": versus(field(f), simcse)}
        return cols | {"start model ahead on STS-B dev": start_ahead} | ({} if readme else {
            "STS-B dev": dev, "best step": best_step})

    return per_backbone(recs, lambda r, bb: paper(r) or "name" in r and not (
        readme and r["name"] in ("minilm-raw-fp32", "glove")), columns)


def extras(files: tuple[str, ...]) -> str:
    """The other λ, the per-pair bound, the released code's loss and longer runs, each against MixCSE (λ = 0.2) at
    its steps; the share of pairs the bound clips."""
    recs = records(*files)

    def columns(rws, bb):
        mix = referenced(rws, "mixcse")
        cols = {"STS avg": value(sts), "− MixCSE": versus(sts, mix)}
        for f, name in probes(recs).items():
            cols |= {f"transfer avg, {name}": value(field(f)), f"transfer − MixCSE, {name}": versus(field(f), mix)}
        return cols | {"best step": best_step,
                       "pairs the bound clips": value(curve_mean("lam_clipped", second_half=False), 3)}

    return per_backbone(recs, lambda r, bb: r.get("preset") == "mixcse" or "preset" in r and not paper(r)
                        or r["label"] == START_OF[bb], columns)


def geometry(files: tuple[str, ...]) -> str:
    """Training signals (second half of training) and the embedding geometry of the selected models (STS-B
    dev+test), the paper's variants against SimCSE."""
    def columns(rws, bb):
        simcse, cols = referenced(rws, "simcse"), {}
        for key, name, digits in (("pos_cos", "positive", 3), ("neg_cos", "random negative", 3),
                                  ("mix_cos", "mixed negative", 3), ("anchor_grad_norm", "anchor gradient", 5)):
            cols[f"{name} cos" if "cos" in key else f"{name} norm"] = value(curve_mean(key), digits)
        for key, digits in (("max_angle", 2), ("uniformity", 4), ("alignment", 4)):
            name, metric = key.replace("_", " "), field("analysis", key)
            cols |= {name: value(metric, digits), f"{name} − SimCSE": versus(metric, simcse, digits)}
        return cols

    recs = [r for r in records(*files) if r.get("analysis")]
    return per_backbone(recs, lambda r, bb: paper(r) or r.get("name", "glove") != "glove", columns)


def tasks(files: tuple[str, ...], starts_only: bool = False) -> str:
    """Per task: STS (Spearman ×100), then transfer (test accuracy ×100) under each probe recorded."""
    recs, out = [r for r in records(*files) if not starts_only or "name" in r], []
    for section, title in [("sts", "STS, Spearman ×100")] + [(f, f"Transfer, {n}, accuracy ×100")
                                                              for f, n in probes(recs).items()]:
        names = STS_TASKS if section == "sts" else TRANSFER_TASKS
        cols = {task_label(t): value(field(section, t)) for t in names} | {"Avg.": value(field(section))}
        for bb, name in BACKBONES.items():
            if rws := rows([r for r in recs if r.get(section)], bb):
                out += [f"**{title} — {name}**", "", *results_table(rws, cols), ""]
    return "\n".join(out + [caption(recs) + " Cells: mean ± std over seeds."])


def probe_gap(files: tuple[str, ...]) -> str:
    """sklearn-converged minus the SentEval PyTorch probe, per task, on the same embeddings: the start models, and
    the SimCSE and MixCSE runs of each backbone together."""
    recs = [r if "name" in r else dict(r, label="SimCSE and MixCSE runs")
            for r in records(*files) if r.get(PYTORCH_FIELD) and r.get("transfer")
            and ("name" in r or paper(r) and r["preset"] in ("simcse", "mixcse"))]
    gap = {task_label(t).replace("avg", "Avg."): value(lambda r, t=t: r["transfer"][t] - r[PYTORCH_FIELD][t],
                                                        sign="+") for t in TRANSFER_TASKS + ("avg",)}
    return per_backbone(recs, lambda r, bb: True, lambda rws, bb: gap, bold=False)


def cost(files: tuple[str, ...]) -> str:
    """Seconds per run: training (with its STS-B dev evaluations) and the final evaluation; the start models'."""
    recs = [r if "name" in r else dict(r, label="runs") for r in records(*files) if r.get("eval_seconds")]
    return per_backbone(recs, lambda r, bb: r.get("name") != "glove", lambda rws, bb: {
        "training steps, s": value(lambda r: r.get("train_seconds"), 0),
        "training with dev evaluations, s": value(lambda r: r.get("train_wall_seconds"), 0),
        "final evaluation, s": value(lambda r: r.get("eval_seconds"), 0)}, bold=False)


def batch_study() -> str:
    """MixCSE at batch 512 / 2048 (the cached step, K = 64) against batch 64 for the recipe's steps (the same
    sentences) and for as many steps (the same updates), seeds paired; the start models of paper_claims_fp32.json."""
    recs = [r for r in records(BATCH, FP32, batch=True) if r.get("name") in ("minilm-raw", "standin-raw-cls")
            or r.get("preset") == "mixcse" and r["lam"] in (None, DEFAULT_LAM)]

    def columns(rws, bb):
        big = [(label, g[0]["steps"]) for label, g in rws if g[0].get("batch_size", TABLE_BATCH) != TABLE_BATCH]
        return {"STS avg": value(sts), "STS-B dev": dev, "best step": best_step,
                "− batch 64, same sentences": versus(sts, {lb: f"MixCSE, batch 64, {RECIPE_STEPS[bb]} steps"
                                                          for lb, _ in big}),
                "− batch 64, same steps": versus(sts, {lb: f"MixCSE, batch 64, {n} steps" for lb, n in big})}

    return per_backbone(recs, lambda r, bb: True, columns)


PAGES = {"claims": ("docs/results.md", (TABLE, *PROBES)), "fp32": ("docs/claims-fp32/results.md", (FP32,))}
BLOCKS = {f"{prefix}-{fn.__name__}": (page, partial(fn, files)) for prefix, (page, files) in PAGES.items()
          for fn in (summary, extras, geometry, tasks, cost)}
BLOCKS |= {"readme-results": ("README.md", partial(summary, (TABLE, *list(PROBES)[:2]), readme=True)),
           "eval-start-models": ("docs/evaluation.md", partial(tasks, (FP32,), starts_only=True)),
           "probe-gap": ("docs/evaluation-protocol.md", partial(probe_gap, (FP32,))),
           "archive-batch-size": ("docs/archive.md", batch_study)}


# ---------------------------------------------------------------------------------------------------- figures
def figure(recs: list[dict], path: Path, draw, xlabel: str, ylabel: str, size=(6, 4), legend: bool = True) -> Path:
    """A panel per backbone, drawn (and titled) by ``draw(ax, plt, backbone, its records)``, at ``path``."""
    plt = pyplot()
    bbs = [bb for bb in BACKBONES if any(r["backbone"] == bb for r in recs)]
    fig, axes = plt.subplots(1, len(bbs), figsize=(size[0] * len(bbs), size[1]), squeeze=False)
    for ax, bb in zip(axes[0], bbs):
        ax.set_title(draw(ax, plt, bb, [r for r in recs if r["backbone"] == bb]), fontsize=9)
        ax.set(xlabel=xlabel, ylabel=ylabel)
        ax.grid(alpha=0.3)
        if legend:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def lines(recs, path, ylabel, title, presets, keys, step_key="step", first_seed=False, log=False) -> Path:
    """Curves over training, a colour per preset, a line per (key, label, style): the mean over seeds at the steps all
    of them logged, in a band from min to max (``first_seed``: that seed alone)."""
    def draw(ax, plt, bb, mine):
        seeds = set()
        for i, preset in enumerate(presets):
            runs = sorted((r for r in mine if r.get("preset") == preset and paper(r) and r.get("curves")),
                          key=lambda r: r["seed"])[:1 if first_seed else None]
            seeds |= {r["seed"] for r in runs}
            for key, label, style in keys:
                per = [p for p in ({s: v for s, v in zip(r["curves"][step_key], r["curves"].get(key) or [])
                                    if v is not None} for r in runs) if p]
                if per:
                    xs = sorted(set.intersection(*(set(p) for p in per)))
                    ax.plot(xs, [statistics.fmean(p[s] for p in per) for s in xs], style, color=f"C{i}", ms=3,
                            marker="o" if step_key != "step" else None, label=NAMES[preset] + label.format(n=len(runs)))
                if len(per) > 1:
                    ax.fill_between(xs, [min(p[s] for p in per) for s in xs], [max(p[s] for p in per) for s in xs],
                                    color=f"C{i}", alpha=0.15)
        ax.set_yscale("log" if log else "linear")
        return title.format(bb=bb, seed=min(seeds, default="--"))

    return figure(recs, path, draw, "step", ylabel)


def align_uniform(recs, path) -> Path:
    """Alignment against uniformity of the selected models (mean over seeds) and the start models."""
    def draw(ax, plt, bb, mine):
        for i, (label, group) in enumerate(rows(mine, bb, lambda r: r.get("analysis") and "fp32" not in r["label"])):
            u, a = (statistics.fmean(r["analysis"][k] for r in group) for k in ("uniformity", "alignment"))
            start = "preset" not in group[0]
            ax.scatter(u, a, color="k" if start else f"C{i % 10}", marker="x" if start else "o", s=35)
            ax.annotate(f"{label} (n={len(group)})", (u, a), textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.xaxis.set_major_locator(plt.MaxNLocator(5))
        return f"{bb}: selected model of each variant, STS-B dev+test"

    return figure(recs, path, draw, r"$\ell_{uniform}$ (lower = more uniform)",
                  r"$\ell_{align}$ (lower = better aligned)", size=(5.5, 4.5), legend=False)


def make_figures(results: str, docs: Path) -> list[Path]:
    """The figures of a claims results file in ``docs``."""
    recs = [r for r in records(results) if not r["suffix"] and r["backbone"] != "glove"]
    first, mean = ("simcse", "mixcse"), "\n(mean over seeds; band = min–max over seeds)"
    cosines = (("pos_cos", ": positive", "-"), ("neg_cos", ": random neg.", "--"), ("mix_cos", ": mixed neg.", ":"))
    return [lines(recs, docs / "claims_cosines.png", "mean cosine", "{bb} (seed {seed}): anchor cosines during "
                  "training", first, cosines, first_seed=True),
            lines(recs, docs / "claims_gradnorm.png", "mean anchor-gradient norm (log)", "{bb}: gradient reaching "
                  "the anchor embeddings" + mean, first, [("anchor_grad_norm", " (n={n})", "-")], log=True),
            lines(recs, docs / "claims_max_angle.png", "max angle between STS-B dev sentences (°)",
                  "{bb}: spread of STS-B dev embeddings" + mean, PAPER_PRESETS, [("max_angle", " (n={n})", "-")],
                  step_key="eval_step"),
            align_uniform(recs, docs / "claims_align_uniform.png")]


def report() -> int:
    """The figures of both claims pages, then every generated block (benchmarks.report)."""
    from benchmarks import report as blocks

    for results, docs in ((TABLE, DOCS), (FP32, DOCS / "claims-fp32")):
        print("\n".join(f"wrote {p.relative_to(REPO)}" for p in make_figures(results, docs)))
    return blocks.main([])
