"""The claims report (benchmarks/claims_report.py): the committed docs tables regenerate from the committed JSON;
claims as data, paired verdicts with a t-test, tables, the generated block of docs/results.md, on synthetic records."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from benchmarks import claims_report
from benchmarks.common import REPO, RESULTS, write_block

FIGURES = ("claims_cosines.png", "claims_gradnorm.png", "claims_max_angle.png", "claims_align_uniform.png")


@pytest.mark.parametrize("results, docs", [("paper_claims.json", "docs"),
                                           ("paper_claims_fp32.json", "docs/claims-fp32")])
def test_the_committed_docs_tables_are_what_the_report_makes_of_the_committed_json(results, docs):
    path, docs = RESULTS / results, REPO / docs
    text = claims_report.render(claims_report.load_results(path), [docs / f for f in FIGURES], path, docs)
    page = (docs / "results.md").read_text(encoding="utf-8")
    begin = page.index(claims_report.RESULTS_BEGIN) + len(claims_report.RESULTS_BEGIN) + 1
    assert page[begin:page.index(claims_report.RESULTS_END)] == text + "\n"
    assert all((docs / f).is_file() for f in FIGURES)


def synthetic_run() -> dict:
    """One run record in the shape `python -m benchmarks.claims paper` writes, with made-up numbers."""
    sts = {task: 70.0 + i for i, task in enumerate(claims_report.STS_TASKS)}
    transfer = {task: 80.0 + i for i, task in enumerate(claims_report.TRANSFER_TASKS)}
    return {
        "backbone": "minilm", "preset": "simcse", "seed": 0, "lam": None, "steps": 20, "mode": "test",
        "eval_precision": "bf16", "eval_steps": 10, "best_step": 20, "raw_dev": 80.0, "best_dev": 81.0,
        "sts": sts | {"avg": sum(sts.values()) / len(sts)},
        "transfer": transfer | {"avg": sum(transfer.values()) / len(transfer)}, "mrpc_f1": 80.0,
        "analysis": {"alignment": 0.25, "uniformity": -3.9, "max_angle": 110.0, "mean_angle": 89.0,
                     "mean_cosine": 0.01},
        "curves": {"step": [5, 10, 15, 20], "pos_cos": [0.92, 0.91, 0.90, 0.90], "neg_cos": [0.02, 0.01, 0.01, 0.01],
                   "mix_cos": [None] * 4, "loss": [0.1, 0.05, 0.04, 0.03], "anchor_grad_norm": [0.01] * 4,
                   "eval_step": [0, 10, 20], "max_angle": [109.0, 109.5, 110.0]},
        "train_seconds": 10.0, "train_wall_seconds": 12.0, "eval_seconds": 5.0, "load_1min_at_start": 1.0,
    }


def synthetic_results() -> dict:
    """Three seeds of SimCSE and MixCSE on one backbone, with known STS averages."""
    template, runs = synthetic_run(), []
    for seed, (sim_avg, mix_avg) in enumerate([(79.0, 79.5), (79.2, 79.4), (78.9, 79.6)]):
        for preset, avg in (("simcse", sim_avg), ("mixcse", mix_avg)):
            r = copy.deepcopy(template)
            r.update(preset=preset, seed=seed, lam=None if preset == "simcse" else 0.2)
            r["sts"]["avg"] = avg
            runs.append(r)
    return {"runs": runs, "baselines": [], "settings": {"backbones": {"minilm": {"steps": 20, "pooler": "avg"}}}}


def test_verdicts_pair_by_seed_with_a_t_test():
    from scipy import stats

    data = synthetic_results()
    lines = "\n".join(claims_report.verdicts(data, "minilm"))
    diffs = [0.5, 0.2, 0.7]
    p = stats.ttest_1samp(diffs, 0.0).pvalue
    assert f"paired t-test p = {p:.2g} (n=3)" in lines
    assert "better on 3/3 seeds" in lines
    one_seed = {**data, "runs": [r for r in data["runs"] if r["seed"] == 0]}
    assert "a single seed: untested" in "\n".join(claims_report.verdicts(one_seed, "minilm"))


def test_results_block_is_replaced_between_markers_only(tmp_path):
    begin, end = claims_report.RESULTS_BEGIN, claims_report.RESULTS_END
    results = tmp_path / "results.md"
    results.write_text(f"# title\nsummary\n{begin}\nold tables\n{end}\nafter\n")
    write_block(results, "new tables", begin, end)
    assert results.read_text() == f"# title\nsummary\n{begin}\nnew tables\n{end}\nafter\n"
    plain = tmp_path / "plain.md"
    plain.write_text("hand-written, no markers\n")
    write_block(plain, "tables", begin, end)  # appended: hand-written text is never lost
    assert plain.read_text() == f"hand-written, no markers\n{begin}\ntables\n{end}\n"
    made = tmp_path / "docs" / "fp32"  # a docs folder not there yet; the page names the command that made it
    claims_report.report(RESULTS / "paper_claims_fp32.json", made, figures=False, quiet=True)
    command = f"`python -m benchmarks.claims report --results benchmarks/results/paper_claims_fp32.json --docs {made}`"
    page = (made / "results.md").read_text()
    assert page.startswith(claims_report.RESULTS_TITLE) and command in page and end in page
    assert not list(made.glob("*.png"))


def test_extras_are_paired_with_mixcse_at_the_default_lambda():
    data = synthetic_results()
    mix = [r for r in data["runs"] if r["preset"] == "mixcse"]
    for r, avg in zip(mix, (79.9, 79.5, 79.6)):  # λ = 0.3: +0.4, +0.1, 0.0 over λ = 0.2
        extra = copy.deepcopy(r)
        extra.update(lam=0.3)
        extra["sts"]["avg"] = avg
        data["runs"].append(extra)
    lines = claims_report.extras_lines(data, "minilm")
    assert len(lines) == 1 and lines[0].startswith("- MixCSE λ=0.3 − MixCSE λ=0.2: STS avg +0.17 ± 0.21 (n=3")
    assert "better on 2/3 seeds" in lines[0]
    assert "## Beyond the paper" in claims_report.render(data, [])
    assert claims_report.extras_lines({**data, "runs": mix}, "minilm") == []


def with_ablation_runs(avgs: dict[str, dict[int, float]]) -> dict:
    """synthetic_results() plus single / wo-sg runs copied from MixCSE's, with the given STS avg per seed."""
    data = synthetic_results()  # MixCSE STS avg 79.5 / 79.4 / 79.6 on seeds 0 / 1 / 2 (mean 79.5)
    template = next(r for r in data["runs"] if r["preset"] == "mixcse")
    for preset, by_seed in avgs.items():
        for seed, avg in by_seed.items():
            r = copy.deepcopy(template)
            r.update(preset=preset, seed=seed)
            r["sts"]["avg"] = avg
            data["runs"].append(r)
    return data


def test_ablation_order_is_judged_on_seeds_both_have():
    data = with_ablation_runs({"mixcse-single": {0: 79.48, 2: 79.58}, "mixcse-wo-sg": {0: 79.3, 2: 79.4}})
    line = next(x for x in claims_report.verdicts(data, "minilm") if x.startswith("3."))
    # single's mean (79.53) is above full's (79.50), but on the seeds both ran full is ahead by 0.02 each time
    assert "full − single: **held**, +0.02 ± 0.00 (n=2)" in line
    assert "single − wo-sg: **held**" in line and ".* **held**: 79.50 / 79.53 / 79.35" in line


def test_an_ablation_step_within_noise_is_not_shown_and_one_beyond_it_against_the_order_fails():
    # full − single: +0.1 / −0.1 / +0.1 (within noise); single − wo-sg: −0.2 on every seed (beyond it)
    data = with_ablation_runs({"mixcse-single": {0: 79.4, 1: 79.5, 2: 79.5},
                               "mixcse-wo-sg": {0: 79.6, 1: 79.7, 2: 79.7}})
    line = next(x for x in claims_report.verdicts(data, "minilm") if x.startswith("3."))
    assert "full − single: **not shown** (within noise)" in line and "single − wo-sg: **did not hold**" in line
    assert ".* **did not hold**: 79.50 / 79.47 / 79.67" in line
    for r in data["runs"]:  # wo-sg now 0.2 below single on every seed: only full > single is left unshown
        if r["preset"] == "mixcse-wo-sg":
            r["sts"]["avg"] -= 0.4
    line = next(x for x in claims_report.verdicts(data, "minilm") if x.startswith("3."))
    assert ".* **not shown** (within noise): 79.50 / 79.47 / 79.27" in line and "single − wo-sg: **held**" in line


def synthetic_probe(avgs: dict[str, list[float]]) -> dict:
    """A steps-probe result with the given STS averages per variant (one per seed)."""
    runs = []
    for variant, values in avgs.items():
        for seed, avg in enumerate(values):
            sts = {t: avg for t in claims_report.STS_TASKS} | {"avg": avg}
            runs.append({"preset": variant, "seed": seed, "best_step": 100, "sts": sts})
    return {"settings": {"steps": 200, "lr": 1e-5, "pooler": "avg", "eval_steps": 25}, "runs": runs}


def test_probe_section_pairs_by_seed_and_judges_the_ablation_chain():
    from scipy import stats

    avgs = {"simcse": [79.0, 79.2, 78.9, 79.1], "mixcse": [79.5, 79.4, 79.6, 79.3],
            "mixcse-single": [79.3, 79.4, 79.2, 79.3], "mixcse-wo-sg": [79.1, 79.0, 79.3, 79.0],
            "mixcse:0.5": [78.0, 78.1, 77.9, 78.2]}
    lines = claims_report.probe_section(synthetic_probe(avgs))
    text = "\n".join(lines)
    assert "| MixCSE λ=0.5 | 4 |" in text and "| SimCSE | 4 |" in text
    mix_sim = next(line for line in lines if line.startswith("- MixCSE − SimCSE:"))
    diffs = [m - s for m, s in zip(avgs["mixcse"], avgs["simcse"])]
    assert f"p = {stats.ttest_1samp(diffs, 0.0).pvalue:.2g} (n=4)" in mix_sim
    assert f"Levene p = {stats.levene(avgs['mixcse'], avgs['simcse']).pvalue:.2g}" in mix_sim
    chain = [line for line in lines if line.startswith(("- MixCSE − MixCSE single", "- MixCSE single − MixCSE wo-sg"))]
    assert len(chain) == 2 and all("Levene" not in line for line in chain)  # spread is judged against the reference
    assert "- MixCSE λ=0.5 − SimCSE: STS avg -1.00 ± 0.08" in text and "better on 0/4 seeds" in text
    assert claims_report.probe_section({"runs": []}) == []


def test_zero_spreads_give_no_ratio_t_test_or_levene_and_no_warning():
    import warnings

    data = synthetic_results()
    for r in data["runs"]:
        r["sts"]["avg"] = 79.0 if r["preset"] == "simcse" else 79.5  # every seed alike: spreads of 0
    probe = synthetic_probe({"simcse": [79.0] * 3, "mixcse": [79.5] * 3})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no 0/0 from scipy either
        lines = claims_report.verdicts(data, "minilm")
        probe_lines = claims_report.probe_section(probe)
    assert "STS avg: **held**, +0.50 ± 0.00 (n=3) points; better on 3/3 seeds (MixCSE" in lines[1]  # no t-test
    assert "(ratio n/a)" in lines[2]
    assert probe_lines[-1] == ("- MixCSE − SimCSE: STS avg +0.50 ± 0.00 (n=3); better on 3/3 seeds; "
                               "spread 0.00 vs 0.00, Levene p = n/a")


def test_a_claim_line_joins_its_paired_checks():
    data = synthetic_results()  # STS avg: SimCSE 79.0 / 79.2 / 78.9, MixCSE 79.5 / 79.4 / 79.6 on seeds 0 / 1 / 2
    runs = {p: claims_report.by_seed(data["runs"], "minilm", p, 20) for p in ("simcse", "mixcse")}
    lower = claims_report.Paired("STS avg", claims_report.sts_avg, sign=-1, unit=" points", means="", share=-1.0)
    angle = claims_report.Paired("Max angle", claims_report.value_of("analysis", "max_angle"), judged=False)
    never = claims_report.Paired("Never run", lambda r: None)  # a check no run has a value for is left out
    line = claims_report.checks_line(runs, "simcse", "mixcse", lower, angle, never)
    assert line.startswith("STS avg: **held**, -0.47 ± 0.25 (n=3) points; better on 3/3 seeds")
    assert line.endswith("(SimCSE 79.03 ± 0.15 (n=3) vs MixCSE 79.50 ± 0.10 (n=3)) (+46.7% of the paper's -1.00). "
                         "Max angle +0.00 ± 0.00 (n=3); better on 0/3 seeds.")
    higher = replace(lower, sign=1, means=None, share=None)
    assert claims_report.checks_line(runs, "simcse", "mixcse", higher) == (
        "STS avg: **did not hold**, -0.47 ± 0.25 (n=3) points; better on 0/3 seeds, paired t-test p = 0.085 (n=3), "
        "not significant.")
    bare = {p: {seed: {**r, "analysis": None} for seed, r in g.items()} for p, g in runs.items()}
    assert claims_report.spread_claim(bare) == "*Spread / uniformity.* n/a"  # a judged check without data


def test_the_spread_claim_counts_lower_uniformity_and_alignment_as_better():
    data = synthetic_results()
    for r in data["runs"]:
        if r["preset"] == "mixcse":  # MixCSE lower (better) on both, on every seed
            step = 0.01 * r["seed"]
            r["analysis"] = {**r["analysis"], "uniformity": -4.0 - step, "alignment": 0.2 - step}
    runs = {p: claims_report.by_seed(data["runs"], "minilm", p, 20) for p in ("simcse", "mixcse")}
    line = claims_report.spread_claim(runs)
    uniformity, alignment = line.split("Uniformity lower")[1], line.split("Alignment difference")[1]
    assert uniformity.startswith(": **held**, -0.1100 ± 0.0100 (n=3); better on 3/3 seeds")
    assert alignment.startswith(" (lower is better) -0.0600 ± 0.0100 (n=3); better on 3/3 seeds")


def test_both_transfer_probes_are_judged_and_tabled_side_by_side():
    data = synthetic_results()
    for r in data["runs"]:  # the PyTorch probe: MixCSE ahead on seeds 0, 1 and behind on 2; sklearn all tied
        value = 82.0 + {("mixcse", 0): 0.3, ("mixcse", 1): 0.1, ("mixcse", 2): -0.1}.get((r["preset"], r["seed"]), 0)
        r[claims_report.PYTORCH_FIELD] = {t: value for t in claims_report.TRANSFER_TASKS} | {"avg": value}
    claim = next(x for x in claims_report.verdicts(data, "minilm") if x.startswith("1."))
    # +0.10 ± 0.20 over 3 seeds is within 2 standard errors of 0: the right sign, but nothing shown
    assert "Transfer avg, SentEval PyTorch probe: **not shown** (within noise), +0.10 ± 0.20 (n=3" in claim
    assert "better on 2/3 seeds" in claim
    assert "Transfer avg, sklearn-converged: **did not hold**, +0.00 ± 0.00 (n=3)" in claim
    text = claims_report.render(data, [])
    assert "## Transfer, SentEval PyTorch probe" in text and "## Transfer, sklearn-converged" in text
    row = next(x for x in claims_report.ablation_table(data, "minilm") if x.startswith("| MixCSE |"))
    assert "| 82.10 ± 0.20 (n=3) | 83.00 ± 0.00 (n=3) |" in row  # PyTorch probe, then sklearn-converged
    half = copy.deepcopy(data)  # a record without the PyTorch probe is left out of that column, not read as 0
    del next(r for r in half["runs"] if r["preset"] == "mixcse" and r["seed"] == 2)[claims_report.PYTORCH_FIELD]
    row = next(x for x in claims_report.ablation_table(half, "minilm") if x.startswith("| MixCSE |"))
    assert "| 82.20 ± 0.14 (n=2) |" in row
