"""Report of the claims benchmark (``python -m benchmarks.claims report``): claim verdicts, tables and figures from
its results JSON, between the markers of docs/results.md. Cells are mean ± sample std over seeds; comparisons are
paired by seed (same data order, same dropout stream). The main table is reported with the GPU seed probes beside it.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable

from benchmarks.common import REPO, RESULTS, finite, mean_std, pyplot, t_test_p, write_block
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
    """A claims results file (runs, baselines, settings); empty lists when it does not exist yet."""
    return {"runs": [], "baselines": [], **(json.loads(path.read_text()) if path.exists() else {})}


# ------------------------------------------------------------------------------------------------ statistics
def direction(diffs: list[float], sign: int = 1) -> bool | None:
    """True when the mean of ``diffs`` has ``sign`` beyond two standard errors of 0, False when it has the other sign
    beyond them, None within them (noise). A single value has no error to judge: its sign decides."""
    m, s, n = mean_std(diffs)
    return None if s is not None and abs(m) < 2 * s / math.sqrt(n) else sign * m > 0


def verdict(held: bool | None) -> str:
    return "**not shown** (within noise)" if held is None else "**held**" if held else "**did not hold**"


def cell(xs, digits: int = 2, show_n: bool = True, signed: bool = False) -> str:
    """mean ± std (n=values); ``signed``: a difference, with its sign, flagged when it is noise."""
    m, s, n = mean_std(xs)
    if m is None:
        return "n/a" if signed else "--"
    text = f"{m:{'+' if signed else ''}.{digits}f}" + (f" ± {s:.{digits}f}" if s is not None else "")
    if signed and direction(xs) is None:
        return text + f" (n={n}, within 2 standard errors of 0)"
    return text + (f" (n={n})" if show_n or signed else "")


def wins(diffs: list[float], sign: int = 1) -> str:
    """How many seeds agree with ``sign``, and a two-sided one-sample t-test of the per-seed differences against 0
    (from 2 seeds on; none when every difference is the same)."""
    if not diffs:
        return ""
    out = f"; better on {sum(sign * d > 0 for d in diffs)}/{len(diffs)} seeds"
    if len(diffs) < 2:
        return out + " (a single seed: untested)"
    if (p := t_test_p(diffs)) is None:
        return out
    return out + f", paired t-test p = {p:.2g} (n={len(diffs)})" + ("" if p < 0.05 else ", not significant")


# -------------------------------------------------------------------------------------------------- grouping
def own_lam(preset: str, lam) -> bool:
    """Whether ``lam`` is the preset's own λ (None, as a variant without ":" has, counts as its own)."""
    return lam is None or lam == PRESET_LAM.get(preset, lam)


def variant_label(preset: str, lam=None) -> str:
    return PRESET_NAMES.get(preset, preset) + ("" if own_lam(preset, lam) else f" λ={lam:g}")


def groups(runs: list[dict], backbone: str) -> dict[tuple, list[dict]]:
    """(preset, lam, steps) -> runs by seed (the latest record wins): own λ first, in preset order, then by λ, steps."""
    out: dict[tuple, dict[int, dict]] = {}
    for r in runs:
        if r.get("backbone") == backbone:
            out.setdefault((r["preset"], r.get("lam"), r.get("steps")), {})[r["seed"]] = r
    rank = list(PRESETS)
    ordered = sorted(out, key=lambda k: (not own_lam(*k[:2]), rank.index(k[0]) if k[0] in rank else len(rank),
                                         k[1] if k[1] is not None else -1, k[2] or 0))
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
    """fn(run_a) - fn(run_b) for every seed both have (and both have a finite value for)."""
    values = [(fn(a[seed]), fn(b[seed])) for seed in sorted(set(a) & set(b))]
    return [va - vb for va, vb in values if finite(va) and finite(vb)]


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


def curve(r: dict, key: str, step_key: str = "step") -> tuple[list, list]:
    """A logged curve of a run: (steps, values), the steps without a value left out."""
    c = r.get("curves") or {}
    points = [(s, v) for s, v in zip(c.get(step_key) or [], c.get(key) or []) if v is not None]
    return [s for s, _ in points], [v for _, v in points]


def curve_mean(r: dict, key: str, second_half: bool = True) -> float | None:
    """A training curve's mean (over the second half of training: the 'stays' in claim 4)."""
    xs = [v for s, v in zip(*curve(r, key)) if not second_half or s > r["steps"] / 2]
    return statistics.fmean(xs) if xs else None


# ---------------------------------------------------------------------------------------------------- claims
@dataclass(frozen=True)
class Paired:
    """A check: ``metric`` of variant a minus b's, per seed; held when the mean difference has ``sign`` beyond two
    standard errors of 0 (direction). ``means``: unit after each side's mean (None: not shown); ``judged``: give a
    verdict; ``share``: the mean difference as a share of b's mean ("b") or of a number (the paper's gain)."""

    label: str
    metric: Callable[[dict], float | None]
    sign: int = 1
    digits: int = 2
    unit: str = ""
    means: str | None = None
    judged: bool = True
    share: str | float | None = None


def compare(check: Paired, a: dict[int, dict], b: dict[int, dict], names: tuple[str, str] = ("", "")) -> str:
    """One check in prose: "label: **held**, +0.17 ± 0.06 (n=3) points; better on 3/3 seeds, ... (a x vs b y)"."""
    diffs = paired(a, b, check.metric)
    sides = [[check.metric(r) for r in runs.values()] for runs in (a, b)]
    held = verdict(direction(diffs, check.sign)) if diffs else "n/a (not measured)"
    text = check.label + (f": {held}," if check.judged else "") + f" {cell(diffs, check.digits, signed=True)}"
    text += check.unit + wins(diffs, check.sign)
    if check.means is not None:
        text += f" ({names[0]} {cell(sides[0])}{check.means} vs {names[1]} {cell(sides[1])}{check.means})"
    if diffs and check.share is not None:
        ref, of = ((mean_std(sides[1])[0], f"{names[1]}'s") if check.share == "b"
                   else (check.share, f"the paper's {check.share:+.2f}"))
        text += f" ({statistics.fmean(diffs) / ref:+.1%} of {of})" if ref else ""
    return text


def checks_line(runs: dict[str, dict[int, dict]], a: str, b: str, *checks: Paired) -> str:
    """The checks of variant a against b in one line; a check neither has a value for (a probe never run) left out."""
    present = [c for c in checks if any(c.metric(r) is not None for r in (*runs[a].values(), *runs[b].values()))]
    return ". ".join(compare(c, runs[a], runs[b], (PRESET_NAMES[a], PRESET_NAMES[b])) for c in present) + "."


STS_DIFF = Paired("STS avg", sts_avg, judged=False)  # a difference, not judged: the extras and the GPU probes
TRANSFER_DIFFS = tuple(Paired(f"transfer avg ({name})", fn, judged=False) for _, name, fn in PROBES_OF_TRANSFER)
STS_GAIN = round(PAPER["mixcse"]["sts"][0] - PAPER["simcse"]["sts"][0], 2)  # the paper's headline: +2.83 STS avg


def gain_claim(runs: dict[str, dict[int, dict]]) -> str:
    return (f"*MixCSE beats SimCSE on STS (paper: {STS_GAIN:+.2f} avg) and on transfer.* " + checks_line(
        runs, "mixcse", "simcse", Paired("STS avg", sts_avg, unit=" points", means="", share=STS_GAIN),
        *(Paired(f"Transfer avg, {name}", fn, unit=" points", means="") for _, name, fn in PROBES_OF_TRANSFER)))


def variance_claim(runs: dict[str, dict[int, dict]]) -> str:
    s_mix, s_sim = (mean_std([sts_avg(r) for r in runs[p].values()]) for p in ("mixcse", "simcse"))
    if s_mix[1] is None or s_sim[1] is None:
        return "*Lower variance across seeds.* n/a (needs ≥ 2 seeds of each)"
    ratio = f"{s_mix[1] / s_sim[1]:.2f}" if s_sim[1] > 0 else "n/a"  # a spread of 0 has no ratio
    return (f"*Lower variance across seeds.* {verdict(s_mix[1] < s_sim[1])}: std of STS avg over seeds MixCSE "
            f"{s_mix[1]:.2f} (n={s_mix[2]}) vs SimCSE {s_sim[1]:.2f} (n={s_sim[2]}) (ratio {ratio}); with so few "
            f"seeds a std is itself very uncertain, so this is weak evidence either way.")


def ablation_claim(runs: dict[str, dict[int, dict]]) -> str:
    """Claim 3, the order full > single > wo-sg on STS avg (the paper's ablation), then on each transfer probe's avg:
    the means and each step paired by seed. The order holds when both steps hold, fails when either goes the other
    way beyond noise."""
    full, single, wo_sg = ABLATION
    names, steps = {full: "full", single: "single", wo_sg: "wo-sg"}, [(full, single), (single, wo_sg), (full, wo_sg)]
    paper = " / ".join(f"{PAPER[p]['sts'][0]:.2f}" for p in ABLATION)
    gaps = ", ".join(f"{PAPER[a]['sts'][0] - PAPER[b]['sts'][0]:+.2f}" for a, b in steps[:2])
    text = f"*full > single > wo-sg on STS avg (paper {paper}; gaps {gaps}).*"
    for prefix, metric in [("", sts_avg)] + [(f" On transfer avg ({name}):", fn) for _, name, fn in PROBES_OF_TRANSFER]:
        means = [mean_std([metric(r) for r in runs[p].values()]) for p in ABLATION]
        if prefix and all(m[0] is None for m in means):
            continue  # a probe no variant has
        if any(m[0] is None for m in means):
            text += f"{prefix} n/a (not measured for every variant)."
            continue
        held = [direction(diffs) if (diffs := paired(runs[a], runs[b], metric)) else None for a, b in steps]
        order = False if False in held[:2] else (True if all(held[:2]) else None)
        text += (f"{prefix} {verdict(order)}: {' / '.join(f'{m[0]:.2f}' for m in means)} "
                 f"(n = {' / '.join(str(m[2]) for m in means)}); " + "; ".join(
                     compare(Paired(f"{names[a]} − {names[b]}", metric), runs[a], runs[b]) for a, b in steps) + ".")
    return text


def signal_claim(runs: dict[str, dict[int, dict]]) -> str:
    mix, sim = runs["mixcse"], runs["simcse"]
    if not (mix and sim):
        return "*Hard-negative signal / gradient.* n/a"
    mix_cos, neg_mix = ([curve_mean(r, key) for r in mix.values()] for key in ("mix_cos", "neg_cos"))
    gap = [a - b for a, b in zip(mix_cos, neg_mix) if a is not None and b is not None]
    grads = [(curve_mean(mix[s], "anchor_grad_norm"), curve_mean(sim[s], "anchor_grad_norm"))
             for s in sorted(set(mix) & set(sim))]
    ratio = [a / b for a, b in grads if a is not None and b]
    first, last = ([(curve(r, "neg_cos")[1] or [None])[i] for r in sim.values()] for i in (0, -1))
    loss_mix, loss_sim = ([curve_mean(r, "loss") for r in g.values()] for g in (mix, sim))
    return (f"*Mixed negatives keep a hard-negative signal and a non-vanishing gradient.* Signal: "
            f"{verdict(bool(gap) and statistics.fmean(gap) > 0)}: over the second half of training, "
            f"anchor·mixed-negative cosine {cell(mix_cos, 3)} vs anchor·random-negative cosine {cell(neg_mix, 3)} "
            f"(gap {cell(gap, 3, signed=True)}); "
            f"SimCSE's random-negative cosine goes {cell(first, 3)} → {cell(last, 3)} (first → last logged step). "
            f"Gradient: {verdict(bool(ratio) and statistics.fmean(ratio) > 1)}: mean anchor-gradient norm (second "
            f"half) MixCSE / SimCSE = {cell(ratio, 2)}×; training loss MixCSE {cell(loss_mix, 6)} vs SimCSE "
            f"{cell(loss_sim, 6)}.")


def spread_claim(runs: dict[str, dict[int, dict]]) -> str:
    angle, uniformity, alignment = (value_of("analysis", k) for k in ("max_angle", "uniformity", "alignment"))
    if not all(paired(runs["mixcse"], runs["simcse"], fn) for fn in (angle, uniformity)):
        return "*Spread / uniformity.* n/a"
    return ("*Wider spread and more uniform at comparable alignment* (best models, STS-B dev+test). " + checks_line(
        runs, "mixcse", "simcse", Paired("Max angle larger", angle, unit="°", means="°"),
        Paired("Uniformity lower", uniformity, sign=-1, digits=4),
        Paired("Alignment difference (lower is better)", alignment, sign=-1, digits=4, judged=False, share="b")))


CLAIMS = (gain_claim, variance_claim, ablation_claim, signal_claim, spread_claim)  # the paper's claims 1-5


def verdicts(data: dict, backbone: str) -> list[str]:
    steps = main_steps(data["runs"], backbone)
    if steps is None:
        return [f"- no SimCSE/MixCSE runs of {backbone} recorded yet"]
    runs = {p: by_seed(data["runs"], backbone, p, steps) for p in PAPER_PRESETS}
    return [f"Runs compared: {steps} steps, mode test; differences are MixCSE − SimCSE paired by seed "
            f"(mean ± std of the per-seed differences, n = seeds with both); a difference within 2 standard errors "
            f"of 0 is noise: the claim is then **not shown** either way."] + [
        f"{i}. {claim(runs)}" for i, claim in enumerate(CLAIMS, 1)]


def extras_lines(data: dict, backbone: str) -> list[str]:
    """Every other λ and the bound / released-code presets against MixCSE at λ = 0.2, paired by seed."""
    steps = main_steps(data["runs"], backbone)
    full, lines = by_seed(data["runs"], backbone, "mixcse", steps), []
    for (preset, lam, n), group in groups(data["runs"], backbone).items():
        if n != steps or (own_lam(preset, lam) and preset in PAPER_PRESETS):
            continue
        other, names = {r["seed"]: r for r in group}, (variant_label(preset, lam), "MixCSE λ=0.2")
        clipped = [x for x in (curve_mean(r, "lam_clipped", second_half=False) for r in group) if x is not None]
        note = f"; the bound lowered λ for {cell(clipped, 3)} of the pairs per step" if clipped else ""
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
        paper = [PAPER.get(preset, {}).get(f) if own_lam(preset, lam) else None for f in ("sts", "transfer")]
        rows.append([variant_label(preset, lam), str(steps), cell([r.get("best_step") for r in runs], 0, show_n=False),
                     cell([r.get("best_dev") for r in runs], show_n=False), cell([sts_avg(r) for r in runs])]
                    + [cell([fn(r) for r in runs]) for _, _, fn in probes]
                    + [f"{number(p[0])} ± {number(p[1])}" if p else "--" for p in paper])
    return markdown_table(header, rows)


# ------------------------------------------------------------------------------------------- GPU seed probes
# `python -m benchmarks.claims steps` on a GPU: STS only, many seeds (file, title); shown when the file exists.
PROBES = (("seeds_probe_gpu.json", "A: all-MiniLM-L6-v2, the table's recipe, 10 seeds"),
          ("lambda_probe_gpu.json", "A: λ, the per-pair bound and the released code's loss, 10 seeds"),
          ("seeds_probe_standin_gpu.json", "B: stand-in, the table's recipe, 10 seeds"),
          ("steps_probe_gpu.json", "A: 1,000 steps (STS-B dev every 125), 2 seeds"))


def probe_section(probe: dict) -> list[str]:
    """A steps probe: its STS table, then each variant minus the first and the ablation chain, paired by seed."""
    from scipy import stats

    runs = probe.get("runs") or []
    by = {v: {r["seed"]: r for r in runs if r["preset"] == v} for v in dict.fromkeys(r["preset"] for r in runs)}
    if not by:
        return []
    variants, label = list(by), {v: variant_label(*parse_variant(v)) for v in by}
    header = ["Model", "n"] + [task_label(t) for t in STS_TASKS] + ["Avg.", "best step"]
    lines = markdown_table(header, [
        [label[v], str(len(by[v]))] + [cell([r["sts"].get(t) for r in by[v].values()], show_n=False)
                                       for t in STS_TASKS + ("avg",)]
        + [cell([r.get("best_step") for r in by[v].values()], 0, show_n=False)] for v in variants]) + [""]
    pairs = [(v, variants[0]) for v in variants[1:]]
    if all(p in by for p in ABLATION):
        pairs += [ABLATION[:2], ABLATION[1:]]
    for a, b in dict.fromkeys(pairs):
        line = f"- {label[a]} − {label[b]}: {compare(STS_DIFF, by[a], by[b])}"
        seeds = sorted(set(by[a]) & set(by[b]))
        if b == variants[0] and len(seeds) > 2:  # the spread of STS avg over the seeds both have (claim 2), Levene
            xa, xb = [sts_avg(by[a][s]) for s in seeds], [sts_avg(by[b][s]) for s in seeds]
            sa, sb = statistics.stdev(xa), statistics.stdev(xb)  # two spreads of 0 have no Levene test
            line += f"; spread {sa:.2f} vs {sb:.2f}, Levene p = " + (f"{stats.levene(xa, xb).pvalue:.2g}" if sa or sb
                                                                     else "n/a")
        lines.append(line)
    return lines


def probe_sections(results_dir: Path) -> dict[str, list[str]]:
    """title -> lines for each probe file present."""
    out = {}
    for name, title in PROBES:
        if (path := results_dir / name).exists():
            probe = json.loads(path.read_text())
            st = probe.get("settings") or {}
            wall = probe.get("wall_seconds") and f"; {probe['wall_seconds']:.0f} s wall for {len(probe['runs'])} runs"
            out[title] = [f"`{_shown(path)}`: {st.get('steps')} steps, lr {st.get('lr')}, pooler {st.get('pooler')}, "
                          f"STS-B dev every {st.get('eval_steps')} steps{wall or ''}", ""] + probe_section(probe)
    return out


# ---------------------------------------------------------------------------------------------------- figures
def _figure(data: dict, path: Path, draw, xlabel: str, ylabel: str, size=(6, 4), presets=FIRST,
            legend: bool = True) -> Path | None:
    """A panel per backbone with runs of ``presets``, drawn (and titled) by ``draw(ax, plt, backbone)``, at ``path``."""
    have = {r["backbone"] for r in data["runs"] if r["preset"] in presets}
    bbs = [b for b in ("minilm", "standin") if b in have] + sorted(have - {"minilm", "standin"})
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


def fig_lines(data: dict, path: Path, ylabel: str, title: str, presets, keys, step_key: str = "step",
              first_seed: bool = False, log: bool = False) -> Path | None:
    """Curves over training, a colour per preset, a line per (key, label, style) of ``keys``: the mean over seeds at
    the steps all of them logged, in a band from min to max (``first_seed``: that seed alone)."""
    def draw(ax, plt, bb):
        seeds, steps = set(), main_steps(data["runs"], bb)
        for i, preset in enumerate(presets):
            runs = [r for _, r in sorted(by_seed(data["runs"], bb, preset, steps).items())]
            runs = runs[:1] if first_seed else runs
            seeds |= {r["seed"] for r in runs}
            for key, label, style in keys:
                per = [p for p in (dict(zip(*curve(r, key, step_key))) for r in runs) if p]
                if not per:
                    continue
                xs = sorted(set.intersection(*(set(p) for p in per)))
                ax.plot(xs, [statistics.fmean(p[s] for p in per) for s in xs], style, color=f"C{i}", ms=3,
                        marker="o" if step_key != "step" else None,
                        label=PRESET_NAMES[preset] + label.format(n=len(runs)))
                if len(runs) > 1:
                    ax.fill_between(xs, [min(p[s] for p in per) for s in xs], [max(p[s] for p in per) for s in xs],
                                    color=f"C{i}", alpha=0.15)
        if log:
            ax.set_yscale("log")
        return title.format(bb=bb, seed=min(seeds, default="--"))

    return _figure(data, path, draw, "step", ylabel)


def fig_align_uniform(data: dict, path: Path) -> Path | None:
    """Alignment against uniformity of every variant's best models (mean over seeds) and the baselines."""
    def draw(ax, plt, bb):
        points = [(b["label"], b["analysis"]["uniformity"], b["analysis"]["alignment"], "k", "x")
                  for b in data["baselines"]
                  if b.get("backbone") == bb and b.get("analysis") and not b["name"].endswith("-fp32")]
        for i, ((preset, lam, steps), runs) in enumerate(groups(data["runs"], bb).items()):
            u, a = (mean_std([value_of("analysis", k)(r) for r in runs])[0] for k in ("uniformity", "alignment"))
            if steps == main_steps(data["runs"], bb) and u is not None and a is not None:
                points.append((f"{variant_label(preset, lam)} (n={len(runs)})", u, a, f"C{i % 10}", "o"))
        for label, u, a, colour, marker in points:
            ax.scatter(u, a, color=colour, marker=marker, s=35)
            ax.annotate(label, (u, a), textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.xaxis.set_major_locator(plt.MaxNLocator(5))
        return f"{bb}: best model of each variant, STS-B dev+test"

    return _figure(data, path, draw, r"$\ell_{uniform}$ (lower = more uniform)",
                   r"$\ell_{align}$ (lower = better aligned)", size=(5.5, 4.5), presets=tuple(PRESETS), legend=False)


def make_figures(data: dict, docs: Path = DOCS) -> list[Path]:
    """The report's figures (those the data has) in ``docs``."""
    cosines = (("pos_cos", ": positive", "-"), ("neg_cos", ": random neg.", "--"), ("mix_cos", ": mixed neg.", ":"))
    mean = "\n(mean over seeds; band = min–max over seeds)"
    made = [fig_lines(data, docs / "claims_cosines.png", "mean cosine",
                      "{bb} (seed {seed}): anchor cosines during training", FIRST, cosines, first_seed=True),
            fig_lines(data, docs / "claims_gradnorm.png", "mean anchor-gradient norm (log)",
                      "{bb}: gradient reaching the anchor embeddings" + mean, FIRST,
                      [("anchor_grad_norm", " (n={n})", "-")], log=True),
            fig_lines(data, docs / "claims_max_angle.png", "max angle between STS-B dev sentences (°)",
                      "{bb}: spread of STS-B dev embeddings" + mean, PAPER_PRESETS, [("max_angle", " (n={n})", "-")],
                      step_key="eval_step"),
            fig_align_uniform(data, docs / "claims_align_uniform.png")]
    return [p for p in made if p is not None]


# ----------------------------------------------------------------------------------------------------- report
def _shown(path: Path) -> Path:
    """``path`` relative to the repository when it is inside it."""
    path = path.resolve()
    return path.relative_to(REPO) if path.is_relative_to(REPO) else path


def _sections(heading: str, parts: dict[str, list[str]], *intro: str) -> list[str]:
    """A ``## heading`` and its intro paragraphs, then a ``### part`` (a backbone's name) per non-empty entry."""
    out = [heading, ""] + [x for line in intro for x in (line, "")]
    for name, lines in parts.items():
        if lines:
            out += [f"### {BACKBONE_NAMES.get(name, name)}", ""] + lines + [""]
    return out


def _settings(data: dict) -> list[str]:
    """The backbones' recipes as config keys (`steps` is `max_steps`; keys TrainConfig no longer has left out)."""
    known, lines = {f.name for f in fields(TrainConfig)}, []
    for bb, cfg in ((data.get("settings") or {}).get("backbones") or {}).items():
        keys = {("max_steps" if k == "steps" else k): v for k, v in cfg.items()}
        if any(r["backbone"] == bb for r in data["runs"]):
            lines.append(f"- **{bb}**: " + ", ".join(f"{k} {v}" for k, v in keys.items() if k in known))
    return ["Settings (config keys):", ""] + lines + [""] if lines else []


def render(data: dict, figures: list[Path], path: Path = RESULTS_JSON, docs: Path = DOCS) -> str:
    """The generated block of ``docs``/results.md for the results file ``path`` (the main one with the GPU probes)."""
    main = path.resolve() == RESULTS_JSON.resolve()
    command = REPORT_COMMAND + ("" if main and docs.resolve() == DOCS.resolve()
                                else f" --results {_shown(path)} --docs {_shown(docs)}")
    probes = probe_sections(path.parent) if main else {}
    out = ["## The full record", "", f"Generated by `{command}` from `{_shown(path)}`"
           + (" and the GPU probe files beside it" if probes else "") + "; do not edit by hand.", ""]
    out += _settings(data)
    backbones = [b for b in ("minilm", "standin") if any(x.get("backbone") == b
                                                         for x in data["runs"] + data["baselines"])]
    out += _sections("## Claim-by-claim verdicts", {bb: verdicts(data, bb) for bb in backbones})
    extras = {bb: extras_lines(data, bb) for bb in backbones}
    if any(extras.values()):
        out += _sections("## Beyond the paper: λ, the per-pair bound, the released code's loss", extras,
                         "Each variant minus MixCSE (λ = 0.2) on the same seeds (same data order), mean ± std of the "
                         "per-seed differences; in parentheses the variant's own STS avg / transfer avg.")
    if probes:
        out += _sections("## More seeds on a GPU (STS only)", probes, "`python -m benchmarks.claims steps` on an "
                         "NVIDIA H200 (bf16 autocast, 10-12 runs at once, a 100k-sentence slice of the corpus, an fp16 "
                         "copy of MiniLM's weights): a separate experiment from the CPU table; compare rows within a "
                         "table, not across.")
    out += _sections("## Ablation: STS avg / transfer avg", {bb: ablation_table(data, bb) for bb in backbones})
    for section, name in [("sts", "STS (Spearman ×100)")] + [
            (field, f"Transfer, {name} (test accuracy ×100)") for field, name, _ in transfer_probes(data)]:
        out += _sections(f"## {name}", {bb: task_table(data, bb, section) for bb in backbones})
    if figures:
        out += ["## Figures", ""] + [f"![{p.stem}]({p.name})" for p in figures] + [""]
    if data["runs"]:
        out += ["## Cost (this machine: 2 shared CPU cores)", ""] + [
            f"- {bb}: {len(rs)} runs; training steps {cell([r.get('train_seconds') for r in rs], 0)} s, "
            f"training incl. dev evaluations {cell([r.get('train_wall_seconds') for r in rs], 0)} s, "
            f"final evaluation {cell([r.get('eval_seconds') for r in rs], 0)} s per run; "
            f"1-min load average {cell([r.get('load_1min_at_start') for r in rs], 1, show_n=False)}"
            for bb in sorted({r["backbone"] for r in data["runs"]})
            for rs in [[r for r in data["runs"] if r["backbone"] == bb]]]
    return "\n".join(out)


RESULTS_BEGIN = "<!-- claims-report:begin (generated by benchmarks/claims_report.py; edit only above this line) -->"
RESULTS_END = "<!-- claims-report:end -->"
RESULTS_TITLE = "# Results: the paper's claims on these machines"


def report(path: Path = RESULTS_JSON, docs: Path = DOCS, figures: bool = True, quiet: bool = False) -> str:
    """Write ``docs``/results.md (and, with ``figures``, the PNGs) from the results file ``path``."""
    data = load_results(path)
    docs.mkdir(parents=True, exist_ok=True)
    text = render(data, make_figures(data, docs) if figures else [], path, docs)
    write_block(docs / "results.md", text, RESULTS_BEGIN, RESULTS_END, f"{RESULTS_TITLE}\n\n")
    if not quiet:
        print(text)
    return text
