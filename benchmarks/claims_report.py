"""Report of the claims benchmark: claim verdicts, tables and figures from its results JSON.

    python -m benchmarks.claims report        # docs/results.md (between its markers) + docs/claims_*.png
    python -m benchmarks.claims report --results benchmarks/results/paper_claims_fp32.json --docs docs/claims-fp32

Cells are mean ± sample std over seeds; comparisons are paired by seed (same data order, same dropout stream). The
main results file is reported with the GPU seed probes (PROBES) beside it.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable, NamedTuple

from benchmarks.common import REPO, RESULTS, pyplot
from mixcse.losses import PRESETS
from mixcse.training.config import TrainConfig
from mixcse.utils.tables import STS_TASKS, TRANSFER_TASKS, markdown_table, number
from mixcse.utils.tables import label as task_label

DOCS = REPO / "docs"
RESULTS_JSON = RESULTS / "paper_claims.json"
REPORT_COMMAND = "python -m benchmarks.claims report"
TABLE_BATCH = 64  # the table's batch; a run of another size is a batch-size run (`python -m benchmarks.claims batch`)
PRESET_LAM = {name: objective.lam for name, objective in PRESETS.items()}  # None for SimCSE
PAPER_PRESETS = ("simcse", "mixcse", "mixcse-single", "mixcse-wo-sg")  # the paper's table; the rest are extras
FIRST = ("simcse", "mixcse")  # the pair the headline claims need
ABLATION = PAPER_PRESETS[1:]  # claim 3: full > single > wo-sg
PYTORCH_FIELD = "transfer_pytorch"  # SentEval's PyTorch probe; "transfer" is sklearn-converged
PRESET_NAMES = {"simcse": "SimCSE", "mixcse": "MixCSE", "mixcse-single": "MixCSE single",
                "mixcse-wo-sg": "MixCSE wo-sg", "mixcse-bound": "MixCSE bound (per-pair λ clip)",
                "mixcse-released": "MixCSE released-code loss"}
BACKBONE_NAMES = {"minilm": "A: all-MiniLM-L6-v2 (continued unsupervised training, mean pooling)",
                  "standin": "B: stand-in mini-wiki-mlm (paper recipe: [CLS]+MLP at train, [CLS] at test)"}
# The MixCSE paper's BERT-base figures (citations, not measurements): (mean, std over its runs). MixCSE, single and
# wo-sg from its ablation table (STS avg / transfer avg); SimCSE's STS avg from its main table (SimCSE's own paper
# reports 76.25). Per-task MixCSE STS: secondary source (docs/released-code.md §4), not checked against the PDF.
PAPER = {"simcse": {"sts": (74.83, 2.32)}, "mixcse": {"sts": (77.66, 0.61), "transfer": (86.33, 0.26)},
         "mixcse-single": {"sts": (76.43, 0.11), "transfer": (85.86, 0.04)},
         "mixcse-wo-sg": {"sts": (75.74, 0.87), "transfer": (84.55, 0.27)}}
PAPER_MIXCSE_STS_TASKS = {"STS12": 71.71, "STS13": 83.14, "STS14": 75.49, "STS15": 83.64, "STS16": 79.00,
                          "STSBenchmark": 78.48, "SICKRelatedness": 72.19, "avg": 77.66}


def parse_variant(variant: str) -> tuple[str, float | None]:
    """A preset name, optionally with λ ("mixcse:0.5"); None = the preset's own λ."""
    preset, _, lam = variant.partition(":")
    return preset, float(lam) if lam else None


def load_results(path: Path = RESULTS_JSON) -> dict:
    data = json.loads(path.read_text()) if path.exists() else {}
    return {"runs": [], "baselines": [], **data}


def paper_cell(preset: str, field: str) -> str:
    """The paper's figure as a table cell, "mean ± std"; "--" if it has none."""
    value = PAPER.get(preset, {}).get(field)
    return "--" if value is None else f"{number(value[0])} ± {number(value[1])}"


def paper_gap(a: str, b: str) -> float:
    return round(PAPER[a]["sts"][0] - PAPER[b]["sts"][0], 2)


# ------------------------------------------------------------------------------------------------ statistics
def _finite(xs) -> list[float]:
    return [float(x) for x in xs if isinstance(x, (int, float)) and math.isfinite(x)]


def mean_std(xs) -> tuple[float | None, float | None, int]:
    xs = _finite(xs)
    if not xs:
        return None, None, 0
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else None), len(xs)


def _noise(m: float, s: float | None, n: int) -> bool:
    """A mean within two standard errors of 0 (a single value has no error: never noise)."""
    return s is not None and abs(m) < 2 * s / math.sqrt(n)


def cell(xs, digits: int = 2, show_n: bool = True, signed: bool = False) -> str:
    """mean ± std (n=values); ``signed``: a difference, with its sign, flagged when it is noise."""
    m, s, n = mean_std(xs)
    if m is None:
        return "n/a" if signed else "--"
    text = f"{m:{'+' if signed else ''}.{digits}f}" + (f" ± {s:.{digits}f}" if s is not None else "")
    if signed and _noise(m, s, n):
        return text + f" (n={n}, within 2 standard errors of 0)"
    return text + (f" (n={n})" if show_n or signed else "")


def _held(ok: bool | None) -> str:
    return "n/a (not measured)" if ok is None else ("**held**" if ok else "**did not hold**")


def _direction(diffs: list[float], sign: int = 1) -> bool | None:
    """True when the mean per-seed difference has ``sign`` beyond two standard errors of 0, False when it has the
    other sign beyond them, None within them (noise). A single seed has no error to judge: its sign decides."""
    m, s, n = mean_std(diffs)
    return None if _noise(m, s, n) else sign * m > 0


def _verdict(direction: bool | None) -> str:
    return "**not shown** (within noise)" if direction is None else _held(direction)


def _wins(diffs: list[float], positive_is_good: bool = True) -> str:
    """How many seeds agree, and a two-sided one-sample t-test of the per-seed differences against 0 (from 2 seeds
    on; none when every difference is the same)."""
    if not diffs:
        return ""
    k = sum(1 for d in diffs if (d > 0 if positive_is_good else d < 0))
    out = f"; better on {k}/{len(diffs)} seeds"
    if len(diffs) < 2:
        return out + " (a single seed: untested)"
    if statistics.stdev(diffs) == 0:
        return out
    from scipy import stats

    p = stats.ttest_1samp(diffs, 0.0).pvalue
    return out + f", paired t-test p = {p:.2g} (n={len(diffs)})" + ("" if p < 0.05 else ", not significant")


# -------------------------------------------------------------------------------------------------- grouping
def variant_label(preset: str, lam) -> str:
    return PRESET_NAMES.get(preset, preset) + ("" if lam == PRESET_LAM.get(preset, lam) else f" λ={lam:g}")


def groups(runs: list[dict], backbone: str) -> dict[tuple, list[dict]]:
    """(preset, lam, steps) -> runs (one per seed; the latest record wins on duplicates): the presets at their own
    λ first, in the library's preset order, then by λ and steps."""
    out: dict[tuple, dict[int, dict]] = {}
    for r in runs:
        if r.get("backbone") == backbone:
            out.setdefault((r["preset"], r.get("lam"), r.get("steps")), {})[r["seed"]] = r
    rank = list(PRESETS)
    ordered = sorted(out, key=lambda k: (k[1] != PRESET_LAM.get(k[0], k[1]), rank.index(k[0]) if k[0] in rank
                                         else len(rank), k[1] if k[1] is not None else -1, k[2] or 0))
    return {k: [out[k][s] for s in sorted(out[k])] for k in ordered}


def main_steps(runs: list[dict], backbone: str) -> int | None:
    """The steps with the most SimCSE/MixCSE runs on this backbone: the ones the verdicts use."""
    count = Counter(r.get("steps") for r in runs if r.get("backbone") == backbone and r["preset"] in FIRST)
    return max(count, key=lambda k: (count[k], k or 0)) if count else None


def by_seed(runs: list[dict], backbone: str, preset: str, steps: int) -> dict[int, dict]:
    """seed -> run of ``preset`` at its own λ."""
    return {r["seed"]: r for r in runs if r.get("backbone") == backbone and r["preset"] == preset
            and r.get("lam") == PRESET_LAM.get(preset) and r.get("steps") == steps}


def paired(a: dict[int, dict], b: dict[int, dict], fn) -> list[float]:
    """fn(run_a) - fn(run_b) for every seed both have (and both values finite)."""
    values = [(fn(a[seed]), fn(b[seed])) for seed in sorted(set(a) & set(b))]
    return [va - vb for va, vb in values if len(_finite([va, vb])) == 2]


def value_of(field: str, key: str = "avg") -> Callable[[dict], float | None]:
    """The metric ``record[field][key]`` (None where the record has none)."""
    return lambda r: (r.get(field) or {}).get(key)


sts_avg, transfer_avg = value_of("sts"), value_of("transfer")
# (record field, label, metric) of the two transfer probes, the papers' first
PROBES_OF_TRANSFER = ((PYTORCH_FIELD, "SentEval PyTorch probe", value_of(PYTORCH_FIELD)),
                      ("transfer", "sklearn-converged", transfer_avg))


def transfer_probes(data: dict) -> tuple:
    """The PROBES_OF_TRANSFER some record of ``data`` has (tables show no column that is empty throughout)."""
    return tuple(p for p in PROBES_OF_TRANSFER if any(r.get(p[0]) for r in data["runs"] + data["baselines"]))


def curve(r: dict, key: str, second_half: bool = False) -> list[float]:
    """A logged training curve's values (over the second half of training: the 'stays' in claim 4)."""
    c = r.get("curves") or {}
    steps, vals = c.get("step") or [], c.get(key) or []
    total = r.get("steps") or (max(steps) if steps else 0)
    return [v for s, v in zip(steps, vals) if v is not None and (not second_half or s > total / 2)]


def curve_mean(r: dict, key: str, second_half: bool = True) -> float | None:
    xs = curve(r, key, second_half)
    return statistics.fmean(xs) if xs else None


# -------------------------------------------------------------------------------------------- claims as data
@dataclass(frozen=True)
class Paired:
    """A check: ``metric`` of variant a minus b's, per seed; held when the mean difference has ``sign`` beyond two
    standard errors of 0 (_direction). ``means``: unit after each side's mean (None: not shown); ``wins``: seeds
    agreeing + t-test; ``judged``: give a verdict; ``relative``: as a share of b's mean; ``paper``: the paper's."""

    label: str
    metric: Callable[[dict], float | None]
    sign: int = 1
    digits: int = 2
    unit: str = ""
    means: str | None = None
    wins: bool = True
    judged: bool = True
    relative: bool = False
    note: str = ""
    paper: float | None = None


def compare(check: Paired, a: dict[int, dict], b: dict[int, dict], names: tuple[str, str] = ("", "")) -> str:
    """One check in prose: "label: **held**, +0.17 ± 0.06 (n=3) points; better on 3/3 seeds, ... (a x vs b y)"."""
    diffs = paired(a, b, check.metric)
    mean = statistics.fmean(diffs) if diffs else None
    verdict = _held(None) if mean is None else _verdict(_direction(diffs, check.sign))
    text = check.label + (f": {verdict}," if check.judged else "")
    text += f" {cell(diffs, check.digits, signed=True)}{check.unit}" + (_wins(diffs, check.sign > 0) if check.wins
                                                                         else "")
    if check.means is not None:
        text += (f" ({names[0]} {cell([check.metric(r) for r in a.values()])}{check.means} vs "
                 f"{names[1]} {cell([check.metric(r) for r in b.values()])}{check.means})")
    ref = mean_std([check.metric(r) for r in b.values()])[0]
    if check.relative and mean is not None and ref:
        text += f" ({mean / ref:+.1%} of {names[1]}'s)"
    return text + check.note


class Claim(NamedTuple):
    """A claim: variant a against b by ``checks``; ``na``: the whole line when a judged check has no data."""

    title: str
    a: str
    b: str
    checks: tuple[Paired, ...]
    na: str | None = None


STS_DIFF = Paired("STS avg", sts_avg, judged=False)  # a difference, not judged: the extras and the GPU probes
TRANSFER_DIFFS = tuple(Paired(f"transfer avg ({name})", fn, judged=False) for _, name, fn in PROBES_OF_TRANSFER)
STS_GAIN = paper_gap("mixcse", "simcse")  # the paper's headline: +2.83 STS avg
CLAIMS = {
    1: Claim(f"*MixCSE beats SimCSE on STS (paper: {STS_GAIN:+.2f} avg) and on transfer.*", "mixcse", "simcse",
             (Paired("STS avg", sts_avg, unit=" points", means="", paper=STS_GAIN),
              *(Paired(f"Transfer avg, {name}", fn, unit=" points", means="") for _, name, fn in PROBES_OF_TRANSFER))),
    5: Claim("*Wider spread and more uniform at comparable alignment* (best models, STS-B dev+test).", "mixcse",
             "simcse", (Paired("Max angle larger", value_of("analysis", "max_angle"), unit="°", means="°", wins=False),
                        Paired("Uniformity lower", value_of("analysis", "uniformity"), sign=-1, digits=4, wins=False),
                        Paired("Alignment difference", value_of("analysis", "alignment"), digits=4, wins=False,
                               judged=False, relative=True, note=" (lower is better)")),
             na="*Spread / uniformity.* n/a"),
}


def render_claim(number_: int, runs: dict[str, dict[int, dict]]) -> str:
    """Claim ``number_`` of CLAIMS, its checks joined into one line."""
    title, a, b, checks, na = CLAIMS[number_]
    if na and not all(paired(runs[a], runs[b], c.metric) for c in checks if c.judged):
        return f"{number_}. {na}"
    names = (PRESET_NAMES[a], PRESET_NAMES[b])
    # a check no run of either side has a value for (a probe this record never ran) is left out, not shown as n/a
    checks = [c for c in checks if any(c.metric(r) is not None for r in (*runs[a].values(), *runs[b].values()))]
    text = f"{number_}. {title} " + ". ".join(compare(c, runs[a], runs[b], names) for c in checks) + "."
    for c in checks:
        diffs = paired(runs[a], runs[b], c.metric) if c.paper else []
        if diffs:
            gain = statistics.fmean(diffs) / c.paper
            text += f" The {c.label.removesuffix(' avg')} gain is {gain:.0%} of the paper's {c.paper:+.2f}."
    return text


def variance_claim(mix: dict, sim: dict) -> str:
    s_mix, s_sim = (mean_std([sts_avg(r) for r in g.values()]) for g in (mix, sim))
    if s_mix[1] is None or s_sim[1] is None:
        return "2. *Lower variance across seeds.* n/a (needs ≥ 2 seeds of each)"
    ratio = f"{s_mix[1] / s_sim[1]:.2f}" if s_sim[1] > 0 else "n/a"  # a spread of 0 has no ratio
    return (f"2. *Lower variance across seeds.* {_held(s_mix[1] < s_sim[1])}: std of STS avg over seeds MixCSE "
            f"{s_mix[1]:.2f} (n={s_mix[2]}) vs SimCSE {s_sim[1]:.2f} (n={s_sim[2]}) (ratio {ratio}); with so few "
            f"seeds a std is itself very uncertain, so this is weak evidence either way.")


def ablation_order(runs: dict[str, dict[int, dict]], metric) -> str | None:
    """The order full > single > wo-sg on ``metric``, each step judged on the paired differences where seeds
    overlap (else on the means): "verdict: means (n); steps | per-step verdicts", None while a variant has no
    value. The order holds when both steps hold, fails when either goes the other way beyond noise."""
    full, single, wosg = ABLATION
    means = {p: mean_std([metric(r) for r in runs[p].values()]) for p in ABLATION}
    if any(m[0] is None for m in means.values()):
        return None

    def ahead(a: str, b: str) -> bool | None:
        diffs = paired(runs[a], runs[b], metric)
        return _direction(diffs) if diffs else means[a][0] > means[b][0]

    fs, sw, fw = ahead(full, single), ahead(single, wosg), ahead(full, wosg)
    order = False if False in (fs, sw) else (True if fs and sw else None)
    steps = "; ".join(compare(Paired(label, metric, judged=False), runs[a], runs[b])
                      for label, a, b in (("full − single", full, single), ("single − wo-sg", single, wosg)))
    return (f"{_verdict(order)}: {' / '.join(f'{m[0]:.2f}' for m in means.values())} "
            f"(n = {' / '.join(str(m[2]) for m in means.values())}); {steps} | full > single: {_verdict(fs)}; "
            f"single > wo-sg: {_verdict(sw)}; full > wo-sg: {_verdict(fw)}.")


def ablation_claim(runs: dict[str, dict[int, dict]]) -> str:
    """Claim 3 on STS avg (the paper's ablation), then the same order on each transfer probe's avg."""
    full, single, wosg = ABLATION
    sts = ablation_order(runs, sts_avg)
    if sts is None:
        return "3. *full > single > wo-sg.* n/a (single / wo-sg runs not recorded yet)"
    paper = " / ".join(f"{PAPER[p]['sts'][0]:.2f}" for p in ABLATION)
    head, tail = sts.split(" | ")
    text = (f"3. *full > single > wo-sg on STS avg (paper {paper}).* {head} (paper {paper_gap(full, single):+.2f}, "
            f"{paper_gap(single, wosg):+.2f}). {tail}")
    for _, name, fn in PROBES_OF_TRANSFER:
        if all(fn(r) is None for p in ABLATION for r in runs[p].values()):
            continue  # a probe no variant has
        order = ablation_order(runs, fn)
        text += (f" On transfer avg ({name}): " + (order.replace(" | ", ". ") if order else
                                                    "n/a (not measured for every variant)"))
    return text


def signal_claim(mix: dict, sim: dict) -> str:
    if not (mix and sim):
        return "4. *Hard-negative signal / gradient.* n/a"
    mix_cos = [curve_mean(r, "mix_cos") for r in mix.values()]
    neg_mix = [curve_mean(r, "neg_cos") for r in mix.values()]
    gap = [a - b for a, b in zip(mix_cos, neg_mix) if a is not None and b is not None]
    grads = [(curve_mean(mix[s], "anchor_grad_norm"), curve_mean(sim[s], "anchor_grad_norm"))
             for s in sorted(set(mix) & set(sim))]
    ratio = [a / b for a, b in grads if a is not None and b]
    first, last = ([(curve(r, "neg_cos") or [None])[i] for r in sim.values()] for i in (0, -1))
    loss_mix, loss_sim = ([curve_mean(r, "loss") for r in g.values()] for g in (mix, sim))
    return (f"4. *Mixed negatives keep a hard-negative signal and a non-vanishing gradient.* Signal: "
            f"{_held(bool(gap) and statistics.fmean(gap) > 0)}: over the second half of training, "
            f"anchor·mixed-negative cosine {cell(mix_cos, 3)} vs anchor·random-negative cosine {cell(neg_mix, 3)} "
            f"(gap {cell(gap, 3, signed=True)}); "
            f"SimCSE's random-negative cosine goes {cell(first, 3)} → {cell(last, 3)} (first → last logged step). "
            f"Gradient: {_held(bool(ratio) and statistics.fmean(ratio) > 1)}: mean anchor-gradient norm (second half) "
            f"MixCSE / SimCSE = {cell(ratio, 2)}×; training loss MixCSE {cell(loss_mix, 6)} vs SimCSE "
            f"{cell(loss_sim, 6)}.")


def verdicts(data: dict, backbone: str) -> list[str]:
    steps = main_steps(data["runs"], backbone)
    if steps is None:
        return [f"- no SimCSE/MixCSE runs of {backbone} recorded yet"]
    runs = {p: by_seed(data["runs"], backbone, p, steps) for p in PAPER_PRESETS}
    return [f"Runs compared: {steps} steps, mode test; differences are MixCSE − SimCSE paired by seed "
            f"(mean ± std of the per-seed differences, n = seeds with both); a difference within 2 standard errors "
            f"of 0 is noise: the claim is then **not shown** either way.",
            render_claim(1, runs), variance_claim(runs["mixcse"], runs["simcse"]), ablation_claim(runs),
            signal_claim(runs["mixcse"], runs["simcse"]), render_claim(5, runs)]


def extras_lines(data: dict, backbone: str) -> list[str]:
    """Every other λ and the bound / released-code presets against MixCSE at λ = 0.2, paired by seed."""
    steps = main_steps(data["runs"], backbone)
    full, lines = by_seed(data["runs"], backbone, "mixcse", steps), []
    for (preset, lam, n), group in groups(data["runs"], backbone).items():
        if n != steps or (lam == PRESET_LAM.get(preset, lam) and preset in PAPER_PRESETS):
            continue
        other, names = {r["seed"]: r for r in group}, (variant_label(preset, lam), "MixCSE λ=0.2")
        clipped = [curve_mean(r, "lam_clipped", second_half=False) for r in group]
        note = f"; the bound lowered λ for {cell(clipped, 3)} of the pairs per step" if _finite(clipped) else ""
        transfer = ("; ".join(compare(d, other, full, names) for d in TRANSFER_DIFFS if any(
            d.metric(r) is not None for r in group)) or "transfer not evaluated (--no-transfer)")
        lines.append(f"- {names[0]} − {names[1]}: {compare(STS_DIFF, other, full, names)}; {transfer} "
                     f"({cell([sts_avg(r) for r in group])} / {cell([transfer_avg(r) for r in group])}{note}).")
    return lines


# ---------------------------------------------------------------------------------------------------- tables
def _baselines(data: dict, backbone: str) -> list[dict]:
    """The backbone's baseline rows; GloVe has no backbone and is shown once, with the primary one."""
    return [b for b in data["baselines"] if b.get("backbone") == backbone
            or (backbone == "minilm" and b.get("backbone") == "glove")]


def task_table(data: dict, backbone: str, section: str) -> list[str]:
    tasks = (STS_TASKS if section == "sts" else TRANSFER_TASKS) + ("avg",)
    header = ["Model", "steps", "n"] + [task_label(t) for t in tasks[:-1]] + ["Avg."]
    rows = [[f"*{b['label']}* (baseline)", "--", "1"] + [number(b[section].get(t)) for t in tasks]
            for b in sorted(_baselines(data, backbone), key=lambda b: b["backbone"] == "glove") if b.get(section)]
    for (preset, lam, steps), runs in groups(data["runs"], backbone).items():
        runs = [r for r in runs if r.get(section)]  # runs recorded without transfer have no transfer row
        if runs:
            rows.append([variant_label(preset, lam), str(steps), str(len(runs))]
                        + [cell([r[section].get(t) for r in runs], show_n=False) for t in tasks])
    if section == "sts":
        rows.append(["*MixCSE BERT-base, paper (secondary source)*", "--", "--"]
                    + [number(PAPER_MIXCSE_STS_TASKS[t]) for t in tasks])
    return markdown_table(header, rows)


def ablation_table(data: dict, backbone: str) -> list[str]:
    probes = transfer_probes(data)
    header = (["Model", "steps", "best step", "STS-B dev", "STS avg"] + [f"transfer avg ({p[1]})" for p in probes]
              + ["paper STS avg (BERT-base)", "paper transfer avg"])
    rows = [[f"*{b['label']}* (baseline)", "--", "--", number(b.get("stsb_dev")), number(sts_avg(b))]
            + [number(fn(b)) for _, _, fn in probes] + ["", ""] for b in _baselines(data, backbone)]
    for (preset, lam, steps), runs in groups(data["runs"], backbone).items():
        in_paper = lam == PRESET_LAM.get(preset, lam)
        rows.append([variant_label(preset, lam), str(steps), cell([r.get("best_step") for r in runs], 0, show_n=False),
                     cell([r.get("best_dev") for r in runs], show_n=False), cell([sts_avg(r) for r in runs])]
                    + [cell([fn(r) for r in runs]) for _, _, fn in probes]
                    + ([paper_cell(preset, "sts"), paper_cell(preset, "transfer")] if in_paper else ["--", "--"]))
    return markdown_table(header, rows)


# ------------------------------------------------------------------------------------------- GPU seed probes
# `python -m benchmarks.claims steps` on a GPU: STS only, many seeds (file, title); shown when the file exists.
PROBES = (("seeds_probe_gpu.json", "A: all-MiniLM-L6-v2, the table's recipe, 10 seeds"),
          ("lambda_probe_gpu.json", "A: λ, the per-pair bound and the released code's loss, 10 seeds"),
          ("seeds_probe_standin_gpu.json", "B: stand-in, the table's recipe, 10 seeds"),
          ("steps_probe_gpu.json", "A: 1,000 steps (STS-B dev every 125), 2 seeds"))
PROBES_HEADING = "## More seeds on a GPU (STS only)"
PROBES_INTRO = ("`python -m benchmarks.claims steps` on an NVIDIA H200 (bf16 autocast, 10-12 runs at once): the CPU "
                "table's recipes over more seeds, STS tasks only (no transfer probes), checkpoint selected on STS-B "
                "dev. A separate experiment from the CPU table (other hardware, a 100k-sentence slice of the corpus, "
                "fp16 copy of MiniLM's weights): compare rows within a table, not across.")


def _probe_label(variant: str) -> str:
    preset, lam = parse_variant(variant)
    return variant_label(preset, PRESET_LAM.get(preset) if lam is None else lam)


def _spread(a: dict[int, dict], b: dict[int, dict]) -> str:
    """Levene's test of the spread of STS avg across the seeds both have (claim 2)."""
    from scipy import stats

    seeds = sorted(set(a) & set(b))
    xa, xb = [sts_avg(a[s]) for s in seeds], [sts_avg(b[s]) for s in seeds]
    sa, sb = statistics.stdev(xa), statistics.stdev(xb)  # two spreads of 0 have no Levene test
    return f"; spread {sa:.2f} vs {sb:.2f}, Levene p = " + (f"{stats.levene(xa, xb).pvalue:.2g}" if sa or sb
                                                            else "n/a")


def probe_section(probe: dict) -> list[str]:
    """A steps-probe result: the STS table (mean ± std over seeds), then each variant minus the first one and, when
    all three are there, the ablation chain MixCSE > single > wo-sg, paired by seed."""
    runs = probe.get("runs") or []
    variants = list(dict.fromkeys(r["preset"] for r in runs))
    if not variants:
        return []
    by = {v: {r["seed"]: r for r in runs if r["preset"] == v} for v in variants}
    header = ["Model", "n"] + [task_label(t) for t in STS_TASKS] + ["Avg.", "best step"]
    rows = [[_probe_label(v), str(len(by[v]))] + [cell([r["sts"].get(t) for r in by[v].values()], show_n=False)
                                                  for t in STS_TASKS + ("avg",)]
            + [cell([r.get("best_step") for r in by[v].values()], 0, show_n=False)] for v in variants]
    lines = markdown_table(header, rows) + [""]
    ref = variants[0]
    pairs = [(v, ref) for v in variants[1:]]
    chain = [p for p in ABLATION if p in by]
    if len(chain) == 3:
        pairs += [(chain[0], chain[1]), (chain[1], chain[2])]
    for a, b in dict.fromkeys(pairs):
        names = (_probe_label(a), _probe_label(b))
        spread = _spread(by[a], by[b]) if b == ref and len(paired(by[a], by[b], sts_avg)) > 2 else ""
        lines.append(f"- {names[0]} − {names[1]}: {compare(STS_DIFF, by[a], by[b], names)}{spread}")
    return lines


def probe_sections(results_dir: Path) -> list[tuple[str, list[str]]]:
    """(title, lines) for each probe file present."""
    out = []
    for name, title in PROBES:
        path = results_dir / name
        if not path.exists():
            continue
        probe = json.loads(path.read_text())
        st = probe.get("settings") or {}
        wall = probe.get("wall_seconds") and f"; {probe['wall_seconds']:.0f} s wall for {len(probe['runs'])} runs"
        out.append((title, [f"`{_shown(path)}`: {st.get('steps')} steps, lr {st.get('lr')}, pooler "
                            f"{st.get('pooler')}, STS-B dev every {st.get('eval_steps')} steps{wall or ''}", ""]
                    + probe_section(probe)))
    return out


# ---------------------------------------------------------------------------------------------------- figures
def _backbones_with(data: dict, presets=FIRST) -> list[str]:
    have = {r["backbone"] for r in data["runs"] if r["preset"] in presets}
    return [b for b in ("minilm", "standin") if b in have] + sorted(have - {"minilm", "standin"})


def _xy(r: dict, key: str, step_key: str = "step"):
    c = r.get("curves") or {}
    pts = [(s, v) for s, v in zip(c.get(step_key) or [], c.get(key) or []) if v is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def _figure(path: Path, bbs: list[str], size: tuple[float, float], draw, xlabel: str, ylabel: str,
            legend: bool = True) -> Path | None:
    """One panel per backbone, ``draw(ax, plt, backbone)`` fills each (and returns its title); saved at ``path``."""
    if not bbs:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, len(bbs), figsize=(size[0] * len(bbs), size[1]), squeeze=False)
    for ax, bb in zip(axes[0], bbs):
        ax.set_title(draw(ax, plt, bb), fontsize=9)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if legend:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def fig_cosines(data: dict, path: Path) -> Path | None:
    def draw(ax, plt, bb):
        steps = main_steps(data["runs"], bb)
        for preset, colour in (("simcse", "C0"), ("mixcse", "C1")):
            runs = by_seed(data["runs"], bb, preset, steps)
            if not runs:
                continue
            r = runs[min(runs)]
            for key, name, style in (("pos_cos", "positive", "-"), ("neg_cos", "random neg.", "--"),
                                     ("mix_cos", "mixed neg.", ":")):
                xs, ys = _xy(r, key)
                if xs:
                    ax.plot(xs, ys, style, color=colour, label=f"{PRESET_NAMES[preset]}: {name}")
        return f"{bb} (seed {r['seed']}): anchor cosines during training"

    return _figure(path, _backbones_with(data), (6, 4), draw, "step", "mean cosine")


def fig_curve(data: dict, path: Path, key: str, ylabel: str, presets, step_key: str = "step",
              log: bool = False, title: str = "") -> Path | None:
    """Mean over seeds at each step logged by all of them, in a band from min to max."""
    def draw(ax, plt, bb):
        steps = main_steps(data["runs"], bb)
        for i, preset in enumerate(presets):
            runs = by_seed(data["runs"], bb, preset, steps).values()
            per = [p for p in (dict(zip(*_xy(r, key, step_key))) for r in runs) if p]
            if not per:
                continue
            xs = sorted(set.intersection(*(set(p) for p in per)))
            ax.plot(xs, [statistics.fmean(p[s] for p in per) for s in xs], color=f"C{i}",
                    marker="o" if step_key != "step" else None, ms=3, label=f"{PRESET_NAMES[preset]} (n={len(runs)})")
            if len(runs) > 1:
                ax.fill_between(xs, [min(p[s] for p in per) for s in xs], [max(p[s] for p in per) for s in xs],
                                color=f"C{i}", alpha=0.15)
        if log:
            ax.set_yscale("log")
        return f"{bb}: {title}\n(mean over seeds; band = min–max over seeds)"

    return _figure(path, _backbones_with(data), (6, 4), draw, "step", ylabel)


def fig_align_uniform(data: dict, path: Path) -> Path | None:
    def draw(ax, plt, bb):
        points = [(b["label"], b["analysis"]["uniformity"], b["analysis"]["alignment"], "k", "x")
                  for b in data["baselines"]
                  if b.get("backbone") == bb and b.get("analysis") and not b["name"].endswith("-fp32")]
        for i, ((preset, lam, steps), runs) in enumerate(groups(data["runs"], bb).items()):
            u = mean_std([value_of("analysis", "uniformity")(r) for r in runs])[0]
            a = mean_std([value_of("analysis", "alignment")(r) for r in runs])[0]
            if steps == main_steps(data["runs"], bb) and u is not None and a is not None:
                points.append((f"{variant_label(preset, lam)} (n={len(runs)})", u, a, f"C{i % 10}", "o"))
        for label, u, a, colour, marker in points:
            ax.scatter(u, a, color=colour, marker=marker, s=35)
            ax.annotate(label, (u, a), textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.xaxis.set_major_locator(plt.MaxNLocator(5))
        return f"{bb}: best model of each variant, STS-B dev+test"

    return _figure(path, _backbones_with(data, presets=tuple(PRESETS)), (5.5, 4.5), draw,
                   r"$\ell_{uniform}$ (lower = more uniform)", r"$\ell_{align}$ (lower = better aligned)", legend=False)


def make_figures(data: dict, docs: Path = DOCS) -> list[Path]:
    made = [
        fig_cosines(data, docs / "claims_cosines.png"),
        fig_curve(data, docs / "claims_gradnorm.png", "anchor_grad_norm", "mean anchor-gradient norm (log)",
                  FIRST, log=True, title="gradient reaching the anchor embeddings"),
        fig_curve(data, docs / "claims_max_angle.png", "max_angle", "max angle between STS-B dev sentences (°)",
                  PAPER_PRESETS, step_key="eval_step", title="spread of STS-B dev embeddings"),
        fig_align_uniform(data, docs / "claims_align_uniform.png"),
    ]
    return [p for p in made if p is not None]


# ----------------------------------------------------------------------------------------------------- report
def _shown(path: Path) -> Path:
    """``path`` relative to the repository when it is inside it."""
    path = path.resolve()
    return path.relative_to(REPO) if path.is_relative_to(REPO) else path


def _timing_lines(data: dict) -> list[str]:
    return [f"- {bb}: {len(rs)} runs; training steps {cell([r.get('train_seconds') for r in rs], 0)} s, "
            f"training incl. dev evaluations {cell([r.get('train_wall_seconds') for r in rs], 0)} s, "
            f"final evaluation {cell([r.get('eval_seconds') for r in rs], 0)} s per run; "
            f"1-min load average {cell([r.get('load_1min_at_start') for r in rs], 1, show_n=False)}"
            for bb in sorted({r["backbone"] for r in data["runs"]})
            for rs in [[r for r in data["runs"] if r["backbone"] == bb]]]


def _probes_used(data: dict) -> str:
    """The transfer probes this record has, in prose for the protocol paragraph."""
    names = {"SentEval PyTorch probe": "SentEval's PyTorch probe, the papers' protocol",
             "sklearn-converged": "the sklearn-converged probe"}
    used = [names[name] for _, name, _ in transfer_probes(data)]
    if len(used) == 2:
        return f"with two probes: {used[0]}, and {used[1]}"
    return f"with {used[0]} only" if used else "no transfer probe recorded"


def _sections(heading: str, parts: dict[str, list[str]], *intro: str) -> list[str]:
    """A ``## heading`` and its intro paragraphs, then a ``### part`` (a backbone's name) per non-empty entry."""
    out = [heading, ""] + [x for line in intro for x in (line, "")]
    for name, lines in parts.items():
        if lines:
            out += [f"### {BACKBONE_NAMES.get(name, name)}", ""] + lines + [""]
    return out


def config_keys(settings: dict) -> dict:
    """A record's backbone settings as config keys (its `steps` is `max_steps`), those TrainConfig has."""
    known = {f.name for f in fields(TrainConfig)}
    return {k: v for k, v in ((("max_steps" if k == "steps" else k), v) for k, v in settings.items()) if k in known}


def _protocol(data: dict, source: str, command: str, probes: bool) -> list[str]:
    out = [f"Generated by `{command}` from `{source}`" + (" and the GPU probe files beside it" if probes else "")
           + "; do not edit by hand.", "",
           "Protocol: each (backbone, variant, seed) trains once; the checkpoint is selected on STS-B dev only "
           "(Spearman, evaluated every `eval_steps` and at the end; among the training checkpoints: the start model "
           "is excluded here, as in the papers, while `mixcse train` also weighs it), then that model is evaluated "
           "once on the 7 STS tasks (Spearman ×100, 'all' for STS12-16) and the 7 transfer tasks (test accuracy "
           f"×100, logistic regression on the same embeddings, {_probes_used(data)}; see "
           "docs/evaluation-protocol.md). Same seed = same data order for every variant. Cells: mean ± sample std "
           "over seeds (n = seeds). The paper's numbers are BERT-base (a different backbone, 1 epoch on wiki1m), for "
           "orientation only.", ""]
    if any(r.get("eval_precision") == "bf16" for r in data["runs"]):
        out += ["The final evaluations ran their inference under CPU bf16 autocast (about 2x faster here; embeddings "
                "within 4e-5 in cosine of fp32); the row 'all-MiniLM-L6-v2 as shipped, fp32 evaluation' is the same "
                "model evaluated in fp32, to show the difference on every task. Checkpoint selection on STS-B dev is "
                "always fp32.", ""]
    settings = (data.get("settings") or {}).get("backbones") or {}
    lines = [f"- **{bb}**: " + ", ".join(f"{k} {v}" for k, v in config_keys(cfg).items())
             for bb, cfg in settings.items() if any(r["backbone"] == bb for r in data["runs"])]
    return out + (["Settings (config keys):", ""] + lines + [""] if settings else [])


def render(data: dict, figures: list[Path], probes: list[tuple[str, list[str]]] = (), source: Path = RESULTS_JSON,
           command: str = REPORT_COMMAND) -> str:
    out = ["## The full record", ""] + _protocol(data, _shown(source), command, bool(probes))
    backbones = [b for b in ("minilm", "standin") if any(x.get("backbone") == b
                                                         for x in data["runs"] + data["baselines"])]
    out += _sections("## Claim-by-claim verdicts", {bb: verdicts(data, bb) for bb in backbones})
    extras = {bb: extras_lines(data, bb) for bb in backbones}
    if any(extras.values()):
        out += _sections("## Beyond the paper: λ, the per-pair bound, the released code's loss", extras,
                         "Each variant minus MixCSE (λ = 0.2) on the same seeds (same data order), mean ± std of the "
                         "per-seed differences; in parentheses the variant's own STS avg / transfer avg.")
    if probes:
        out += _sections(PROBES_HEADING, dict(probes), PROBES_INTRO)
    out += _sections("## Ablation: STS avg / transfer avg", {bb: ablation_table(data, bb) for bb in backbones})
    sections = [("sts", "## STS (Spearman ×100)")] + [
        (field, f"## Transfer, {name} (test accuracy ×100)") for field, name, _ in transfer_probes(data)]
    for section, heading in sections:
        out += _sections(heading, {bb: task_table(data, bb, section) for bb in backbones})
    if figures:
        out += ["## Figures", ""] + [f"![{p.stem}]({p.name})" for p in figures] + [""]
    if data["runs"]:
        out += ["## Cost (this machine: 2 shared CPU cores)", ""] + _timing_lines(data)
    return "\n".join(out)


RESULTS_BEGIN = "<!-- claims-report:begin (generated by benchmarks/claims_report.py; edit only above this line) -->"
RESULTS_END = "<!-- claims-report:end -->"
RESULTS_TITLE = "# Results: the paper's claims on these machines"


def write_results(path: Path, generated: str) -> None:
    """Put ``generated`` between the markers of ``path`` (docs/results.md), keeping the hand-written text around
    them; a page without markers gets the block appended, a missing one is created with a title."""
    text = path.read_text(encoding="utf-8") if path.exists() else f"{RESULTS_TITLE}\n\n"
    head, begin, rest = text.partition(RESULTS_BEGIN)
    tail = rest.partition(RESULTS_END)[2] if begin else "\n"
    path.write_text(f"{head}{RESULTS_BEGIN}\n{generated.rstrip()}\n{RESULTS_END}{tail}", encoding="utf-8")


def generated(data: dict, path: Path, docs: Path, figures: list[Path]) -> str:
    """The generated block of ``docs``/results.md for the results file ``path``; only the main table gets the GPU
    probes beside it."""
    main = path.resolve() == RESULTS_JSON.resolve()
    command = REPORT_COMMAND + ("" if main and docs.resolve() == DOCS.resolve()
                                else f" --results {_shown(path)} --docs {_shown(docs)}")
    return render(data, figures, probe_sections(path.parent) if main else [], path, command)


def report(path: Path = RESULTS_JSON, docs: Path = DOCS, figures: bool = True, quiet: bool = False) -> str:
    data = load_results(path)
    docs.mkdir(parents=True, exist_ok=True)
    text = generated(data, path, docs, make_figures(data, docs) if figures else [])
    write_results(docs / "results.md", text)
    if not quiet:
        print(text)
    return text
