"""The table toolkit (benchmarks/common.py) and the claims' tables (benchmarks/claims_report.py) on synthetic records:
no mean across machine kinds, differences paired by seed with the bold rule, captions that say what a record lacks,
the start model first, one row per machine kind, extras against MixCSE at their own steps."""

from __future__ import annotations

import json

import pytest
from scipy import stats

from benchmarks import claims_report, common

XEON, H200 = {"cpu": "Intel(R) Xeon(R) Processor", "torch": "2.13.0+cpu", "torch_threads": 2}, {"gpu": "NVIDIA H200"}


def rec(seed, value, machine=XEON, **more) -> dict:
    return {"seed": seed, "v": value, "machine": machine, "date": "2026-01-02 03:04:05", **more}


def v(r):
    return r["v"]


def test_a_mean_is_never_taken_across_machine_kinds():
    assert common.machine_kind(XEON) == "Intel Xeon" and common.machine_kind({**XEON, **H200}) == "NVIDIA H200"
    mixed = [rec(0, 1.0), rec(1, 2.0, H200)]
    for fn in (lambda: common.kind_of(mixed), lambda: common.mean_cell(mixed, v),
               lambda: common.results_table([("row", mixed)], {"v": common.value(v)}),
               lambda: common.mean_cell([rec(0, 1.0, machine=None)], v)):  # a record without a machine: refused too
        with pytest.raises(ValueError, match="machine kind"):
            fn()
    assert list(common.by_kind(mixed)) == ["Intel Xeon", "NVIDIA H200"]
    assert common.mean_cell([rec(0, 1.0), rec(1, 2.0)], v) == "1.50 ± 0.71"
    assert common.mean_cell([rec(0, 2)], v) == "2.00"


def test_a_difference_is_paired_by_seed_and_bold_only_by_the_rule():
    base = [rec(s, 10.0 + s) for s in range(4)]
    up = [rec(s, 10.5 + s + 0.02 * s) for s in range(4)]  # +0.50, +0.52, +0.54, +0.56: p far below 0.05
    p = stats.ttest_1samp([0.5, 0.52, 0.54, 0.56], 0.0).pvalue
    assert common.diff_cell(up, base, v) == f"**+0.53 ± 0.03 (4/4, p = {p:.2g})**"
    two = common.diff_cell(up[:2], base, v)  # two seeds: consistent, p < 0.05 is impossible to claim: not bold
    assert not two.startswith("**") and "(2/2" in two
    noisy = [rec(s, 10.0 + s + d) for s, d in enumerate((0.3, -0.2, 0.1, -0.1))]
    assert not common.diff_cell(noisy, base, v).startswith("**") and "(2/4" in common.diff_cell(noisy, base, v)
    assert common.diff_cell([rec(7, 1.0)], base, v) == "–"  # no shared seed: nothing to pair
    start = [{k: x for k, x in rec(None, 10.0).items() if k != "seed"}]  # a start model, evaluated once
    assert common.paired_diffs(up, start, v) == pytest.approx([0.5, 1.52, 2.54, 3.56])
    with pytest.raises(ValueError, match="one machine kind"):
        common.diff_cell(up, [rec(s, 10.0, H200) for s in range(4)], v)


def test_a_table_compares_rows_of_the_same_machine_only():
    rows = [("SimCSE", [rec(s, 1.0 + s) for s in range(3)]), ("MixCSE", [rec(s, 1.5 + s) for s in range(3)]),
            ("MixCSE", [rec(s, 9.0, H200) for s in range(3)])]  # no SimCSE on the GPU: no difference there
    lines = common.results_table(rows, {"v": common.value(v), "− SimCSE": common.versus(v, "SimCSE")})
    assert lines[0] == "| model | machine | n | v | − SimCSE |"
    assert lines[3].startswith("| MixCSE | Intel Xeon | 3 | 2.50 ± 1.00 | +0.50 ± 0.00 (3/3) |")
    assert lines[4] == "| MixCSE | NVIDIA H200 | 3 | 9.00 ± 0.00 |  |"


def test_a_caption_names_the_machines_dates_and_what_the_records_lack():
    recs = [rec(0, 1, precision="bf16", commit="abc1234"), rec(1, 1, precision="bf16", date="2026-01-05"),
            rec(0, 1, H200, provenance="from the commit that added the file")]
    text = common.caption(recs)
    assert text.startswith("Machines: Intel Xeon: 2 records, 2026-01-02 – 2026-01-05, precision bf16, commit abc1234")
    assert "torch 2.13.0+cpu, threads 2; not recorded: commit;" in text
    assert text.endswith("NVIDIA H200: 1 records, 2026-01-02; not recorded: precision, commit, torch, threads "
                         "(from the commit that added the file).")
    with pytest.raises(ValueError, match="no date"):
        common.caption([rec(0, 1, date=None)])


def claims_file(tmp_path, monkeypatch) -> None:
    """paper.json: a start model and SimCSE / MixCSE / MixCSE λ=0.5 on a CPU, seeds 0-2; probe: SimCSE / MixCSE on a
    GPU (a GPU seed-probe file, its machine at the file's level), in claims_report.RESULTS."""
    def run(preset, seed, sts, lam=0.2, **more):
        return {"backbone": "minilm", "preset": preset, "seed": seed, "lam": None if preset == "simcse" else lam,
                "steps": 200, "eval_precision": "bf16", "sts": {"avg": sts}, "transfer": {"avg": 80.0 + sts / 100},
                "raw_dev": 80.0, "best_dev": 79.0 if seed == 0 else 81.0, "best_step": 200, "machine": XEON,
                "date": "2026-01-02", **more}
    runs = [run(p, s, base + s + d) for s in range(3) for p, base, d in (("simcse", 70.0, 0), ("mixcse", 70.5, s / 10))]
    runs += [run("mixcse", s, 69.0 + s, lam=0.5) for s in range(3)]
    start = {"name": "minilm-raw", "backbone": "minilm", "eval_precision": "bf16", "sts": {"avg": 69.0},
             "stsb_dev": 80.0, "machine": XEON, "date": "2026-01-01"}
    (tmp_path / "paper.json").write_text(json.dumps({"runs": runs, "baselines": [start]}))
    probe = [{"preset": p, "seed": s, "steps": 200, "sts": {"avg": 75.0 + s + (p == "mixcse")}, "raw_dev": 80.0,
              "best_dev": 81.0, "best_step": 200} for s in range(3) for p in ("simcse", "mixcse")]
    (tmp_path / "seeds_probe_gpu.json").write_text(json.dumps({"machine": H200, "date": "2026-01-03", "runs": probe}))
    monkeypatch.setattr(claims_report, "RESULTS", tmp_path)


def test_the_claims_table_starts_with_the_start_model_and_gives_a_row_per_machine(tmp_path, monkeypatch):
    claims_file(tmp_path, monkeypatch)
    text = claims_report.summary(("paper.json", "seeds_probe_gpu.json"), readme=True)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [row.split(" | ")[:3] for row in rows] == [
        ["| all-MiniLM-L6-v2 untouched (start model)", "Intel Xeon", "1"], ["| SimCSE", "Intel Xeon", "3"],
        ["| MixCSE", "Intel Xeon", "3"], ["| SimCSE", "NVIDIA H200", "3"], ["| MixCSE", "NVIDIA H200", "3"]]
    mix_cpu, mix_gpu = rows[2].split(" | "), rows[4].split(" | ")
    p = stats.ttest_1samp([0.5, 0.6, 0.7], 0.0).pvalue
    assert mix_cpu[4] == f"**+0.60 ± 0.10 (3/3, p = {p:.2g})**"  # − SimCSE, paired by seed on the CPU
    p = stats.ttest_1samp([1.5, 2.6, 3.7], 0.0).pvalue  # − the start model's one value (69.0): not significant
    assert mix_cpu[5] == f"+2.60 ± 1.10 (3/3, p = {p:.2g})"
    assert mix_cpu[-1] == "1/3 |" and mix_gpu[-1] == "0/3 |"  # the start model ahead on STS-B dev
    assert mix_gpu[4] == "+1.00 ± 0.00 (3/3)" and mix_gpu[5] == ""  # no start model evaluated on the GPU
    assert "λ=0.5" not in text and text.endswith(common.BOLD_RULE)
    assert "NVIDIA H200: 6 records, 2026-01-03; not recorded: precision, commit, torch, threads" in text


def test_extras_are_compared_with_mixcse_at_the_default_lambda(tmp_path, monkeypatch):
    claims_file(tmp_path, monkeypatch)
    text = claims_report.extras(("paper.json",))
    row = next(line for line in text.splitlines() if line.startswith("| MixCSE λ=0.5 |"))
    assert "| 70.00 ± 1.00 | **-1.60 ± 0.10 (0/3, p = " in row  # 69 + s against 70.5 + s + s/10
    assert text.splitlines()[4].startswith("| all-MiniLM-L6-v2 untouched (start model) |")
