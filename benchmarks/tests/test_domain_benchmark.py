"""benchmarks.domain on tiny models and tiny data: run keys, the results JSON as the run cache (a recorded run is
never trained again), resuming a mixcse run cut off mid-training, and each subcommand end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import common, domain
from conftest import TOPICS, needs_example_data

TINY = ["--set", "max_steps=2", "eval_steps=1", "batch_size=8", "learning_rate=1e-3"]


def test_keys_name_the_domain_and_only_the_settings_that_differ_from_the_base():
    assert domain.similarity_key("products", "mixcse", dict(domain.DEFAULTS), 0) == "products|mixcse|recipe|seed0"
    assert domain.similarity_key("medical", "mixcse", {**domain.DEFAULTS, "learning_rate": 3e-5}, 2) == (
        "medical|mixcse|learning_rate=3e-05|seed2")


def test_paired_differences_need_two_seeds_and_a_spread_for_a_p_value():
    assert domain.paired({0: 1.0}, {0: 0.5}) is None
    assert domain.paired({0: 1.0, 1: 2.0}, {0: 0.5, 1: 1.5}) == {"mean": 0.5, "std": 0.0, "n": 2, "wins": 2,
                                                                 "p": None}
    d = domain.paired({0: 1.0, 1: 2.0, 2: 3.0}, {0: 0.5, 1: 1.0, 2: 1.0, 3: 9.0})  # seed 3: one side only
    assert d["mean"] == pytest.approx(7 / 6) and 0 < d["p"] < 1 and (d["n"], d["wins"]) == (3, 3)
    assert domain.paired({0: 2.0, 1: 1.0}, 1.5)["wins"] == 1  # against the start model: one number
    assert domain.fmt_diff(d).startswith("+1.17 ± ") and not domain.fmt_diff(d).startswith("**")
    significant = {"mean": 3.0, "std": 0.1, "n": 3, "wins": 3, "p": 0.001}
    assert domain.fmt_diff(significant) == "**+3.00 ± 0.10, 3/3, p = 0.001**"


def test_each_row_is_paired_with_the_baselines_row_of_its_own_settings_else_the_shipped_one(tmp_path, monkeypatch):
    """Two SimCSE rows of 3 seeds: a MixCSE row is paired with the SimCSE row of its own settings; a row whose
    settings no SimCSE row has (CT) with the SimCSE row of most seeds, the shipped recipe's on a tie."""
    def runs(method, lr, aps, **extra):
        settings = {**domain.DEFAULTS, "learning_rate": lr, **extra}
        return [{"domain": "medical", "method": method, "settings": settings, "machine": "m", "seed": s,
                 "best_step": 1, "seconds": 1.0, **{k: 0.0 for k in domain.SCORES}, "mqp_test_ap": ap}
                for s, ap in enumerate(aps)]
    guard = {"guard_data": "stsb_dev", "guard_tolerance": 0.3}
    (tmp_path / "r-simcse.yaml").write_text("model: m\ntrain_file: t\noutput_dir: o\nloss: simcse\n"
                                            "learning_rate: 3.0e-5\nguard_data: stsb_dev\nguard_tolerance: 0.3\n"
                                            "max_steps: 200\neval_steps: 50\n")
    monkeypatch.setattr(domain, "RECIPES", {"medical": str(tmp_path / "r-mixcse.yaml")})
    shipped = runs("simcse", 3e-5, [1, 2, 3], **guard)  # the SimCSE recipe's settings
    assert domain.row_label("medical", "simcse", shipped[0]["settings"]) == "simcse, shipped recipe"
    results = {"zero_shot": {"mqp_test_ap": 0.0}, "runs": runs("simcse", 5e-5, [5, 5, 5]) + shipped + runs(
        "mixcse", 5e-5, [6, 7, 5]) + runs("mixcse", 3e-5, [2, 3, 5], **guard) + runs("ct", 9e-5, [0, 0, 1])}
    rows = {round(r["mqp_test_ap"][0], 3): r for r in domain.similarity_rows(results, "medical")}
    assert rows[6.0]["vs_simcse"]["mean"] == pytest.approx(1.0)  # against SimCSE at 5e-5: 1, 2, 0
    assert rows[round(10 / 3, 3)]["vs_simcse"]["mean"] == pytest.approx(4 / 3)  # against the shipped: 1, 1, 2
    assert rows[round(1 / 3, 3)]["vs_simcse"]["mean"] == pytest.approx(-5 / 3)  # CT against the shipped
    assert "vs_simcse" not in rows[5.0] and rows[5.0]["vs_ct"]["mean"] == pytest.approx(14 / 3)


def write_pairs(path: Path, pairs: list[tuple[str, str, int]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("sentence1\tsentence2\tlabel\n" + "".join(f"{a}\t{b}\t{y}\n" for a, b, y in pairs))
    return path


@pytest.fixture
def tiny_similarity(tiny_bert, synthetic_data, tmp_path, monkeypatch):
    """The domains' texts, pairs, STS data, MiniLM and cache replaced by topic-word sentences, the tiny BERT and a
    temporary folder."""
    data = tmp_path / "domains"
    same = [(" ".join(t[:4]), " ".join(t[4:8]), 1) for t in TOPICS] + [
        (" ".join(TOPICS[i][:4]), " ".join(TOPICS[i + 1][4:8]), 0) for i in range(7)]
    pairs = {name: write_pairs(data / f"{name}.tsv", same) for name in domain.PAIRS}
    for train in ("products/unlabeled.txt", "medical-questions/unlabeled.txt"):
        (data / train).parent.mkdir(parents=True, exist_ok=True)
        (data / train).write_text("\n".join(" ".join(t[i:i + 5]) for t in TOPICS for i in range(6)) + "\n")
    monkeypatch.setattr(domain, "DATA", data)
    monkeypatch.setattr(domain, "PAIRS", pairs)
    monkeypatch.setattr(domain, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(common, "DOWNSTREAM", synthetic_data["data_dir"])
    monkeypatch.setattr(common, "minilm_path", lambda: str(tiny_bert))


def test_similarity_compare_and_sweep_share_the_cache_and_the_report(tiny_similarity, tmp_path, monkeypatch):
    """mixcse's row and a sentence-transformers baseline, 2 steps each, on topic-word questions."""
    results, docs = tmp_path / "similarity_adaptation.json", tmp_path / "docs"
    docs.mkdir()
    base = ["similarity", "--results", str(results), "--docs", str(docs), "--seeds", "0", "--in-process"]

    assert domain.main(base + ["--methods", "mixcse", "mnrl"] + TINY) == 0
    written = json.loads(results.read_text())
    assert set(written["zero_shot"]) == set(domain.SCORES + domain.F1S)
    assert [r["key"] for r in written["runs"]] == [
        "products|mixcse|batch_size=8,eval_steps=1,learning_rate=0.001,max_steps=2|seed0",
        "products|mnrl|batch_size=8,eval_steps=1,learning_rate=0.001,max_steps=2|seed0"]
    assert all(r["domain"] == "products" and set(domain.SCORES + domain.F1S) <= set(r) for r in written["runs"])
    assert all(r["best_step"] in (0, 1, 2) and r["peak_rss_mb"] is None for r in written["runs"])
    assert written["recipe"] == domain.DEFAULTS and written["machines"] and written["code"]
    assert domain.main(base + ["--domain", "medical", "--methods", "simcse"] + TINY) == 0

    assert domain.main(base + ["--methods", "mixcse"] + TINY + ["--grid", "temperature=0.05,0.1"]) == 0
    sweep = json.loads(results.read_text())["sweep"]
    assert [r["settings"]["temperature"] for r in sweep] == [0.05, 0.1] and len(sweep) == 2
    monkeypatch.setattr(domain, "similarity_run", lambda *a: pytest.fail("a recorded run was trained again"))
    assert domain.main(base + ["--methods", "mixcse", "mnrl"] + TINY) == 0  # every row recorded already
    report = (docs / "similarity_adaptation_results.md").read_text()
    assert "### Trained on products" in report and "### Trained on medical" in report
    assert "| mnrl (batch_size=8" in report and "### Exploration (single seeds)" in report
    decision = (docs / "domain-adaptation.md").read_text()
    start, end = common.block_markers("domain-decision")
    assert decision.index(start) < decision.index("**products**") < decision.index("**medical**") < decision.index(end)
    assert "| start model (all-MiniLM-L6-v2, zero-shot) | – |" in decision and "test F1 (dev threshold)" in decision


def test_a_mixcse_run_cut_off_mid_training_resumes_from_its_checkpoint_and_records_what_an_uninterrupted_run_does(
        tiny_similarity, tmp_path, interrupted_at_call, capsys):
    from mixcse.training import step

    settings = {**domain.DEFAULTS, "max_steps": 4, "eval_steps": 2, "batch_size": 8, "learning_rate": 1e-3}
    run = ("products", "mixcse", settings, 0)
    key = domain.similarity_key(*run)
    whole = domain.similarity_run(*run, tmp_path / "whole")

    records, saves = [], []
    with interrupted_at_call(step, "training_loss", 3):  # dies inside step 3, after the checkpoint at step 2
        domain.run_missing([(key, run)], records, lambda run, out: domain.similarity_run(*run, out),
                           lambda: saves.append(1))
    assert not records and not saves
    assert domain.resumable_step(tmp_path / "cache" / key.replace("|", "_")) == 2
    domain.run_missing([(key, run)], records, lambda run, out: domain.similarity_run(*run, out),
                       lambda: saves.append(1))

    (resumed,) = records
    out = capsys.readouterr().out
    assert saves == [1] and f"{key.replace('|', '_')}: resuming from its checkpoint at step 2" in out
    for field in ("key", "best_step", *domain.SCORES):
        assert resumed[field] == whole[field], field
    assert domain.resumable_step(tmp_path / "cache" / key.replace("|", "_")) is None  # the checkpoint is gone


@needs_example_data(domain.DATA)
def test_main_job_keeps_one_record_per_machine_kind(tiny_bert, tmp_path, monkeypatch):
    results = tmp_path / "main_job.json"
    tiny = ["--set", f"model={tiny_bert}", "max_steps=2", "eval_steps=1", "batch_size=8"]
    for extra in ([], ["--no-bf16"], []):  # the plain kind twice: its record is replaced, the other kept
        assert domain.main(["main-job", "--results", str(results), *extra, *tiny]) == 0
    records = json.loads(results.read_text())["records"]
    assert len(records) == 2 and records[0]["kind"] != records[1]["kind"]
    plain, no_bf16 = records[1], records[0]
    assert no_bf16["machine"]["precision"] == "fp32" and no_bf16["machine"]["torch_kernels"] in ("AVX2", "DEFAULT")
    assert no_bf16["machine"]["kernel_limits"]["ATEN_CPU_CAPABILITY"] == "avx2"
    for written in records:
        assert written["recipe"] == domain.MAIN_JOB_RECIPE and written["summary"]["steps"] == 2
        assert any(line.startswith("start dev pairs AP") for line in written["report"]) and written["wall_seconds"] > 0
        assert any(line.startswith("guard stsb_dev (tolerance 0.3)") for line in written["report"])
        assert set(written["summary"]["seconds"]) == {"train", "select", "guard", "test", "other"}
    monkeypatch.setattr(domain.common, "RESULTS", tmp_path)
    text = domain.render_main_job()
    assert text.count("\n- ") == 2 and f"- {plain['kind']} (" in text and "other " in text


@pytest.mark.parametrize("argv", [["similarity", "--set", "max_steps"], ["similarity", "--methods", "nope"],
                                  ["retrieval"], ["similarity", "--seeds", "x"], []])
def test_bad_input_is_one_error_line_and_exit_code_2(argv, capsys):
    with pytest.raises(SystemExit) as exit:
        domain.main(argv)
    assert exit.value.code == 2
    assert ": error: " in capsys.readouterr().err.strip().splitlines()[-1]


def test_label_budget_picks_among_the_saved_candidates_of_the_recipes_runs(tiny_similarity, tmp_path, monkeypatch):
    """Two seeds of a tiny 'shipped recipe', then selection re-run on 4, 8 and all dev pairs: every pick is one of
    the runs' candidates, the all-pairs pick is the run's own choice, and the block renders from the JSON."""
    recipe = tmp_path / "r-mixcse.yaml"
    recipe.write_text("model: m\ntrain_file: t\noutput_dir: o\nloss: mixcse\nlearning_rate: 1.0e-3\nmax_steps: 2\n"
                      "eval_steps: 1\nbatch_size: 8\nmax_seq_length: 32\nguard_data: stsb_dev\n"
                      "guard_tolerance: 0.3\ninterpolate: search\n")
    monkeypatch.setattr(domain, "RECIPES", {"products": str(recipe), "medical": str(recipe)})
    monkeypatch.setattr(domain, "DOMAINS", {"products": domain.DOMAINS["products"]})
    monkeypatch.setattr(domain, "BUDGETS", (4, 8, None))
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    (tmp_path / "docs").mkdir()
    assert domain.main(["similarity", "--results", str(tmp_path / "similarity_adaptation.json"), "--docs",
                        str(tmp_path / "docs"), "--seeds", "0", "1", "--in-process", "--methods", "mixcse", "--set",
                        "max_steps=2", "eval_steps=1", "batch_size=8", "learning_rate=1e-3", "guard_data=stsb_dev",
                        "guard_tolerance=0.3", "interpolate=search"]) == 0
    runs = json.loads((tmp_path / "similarity_adaptation.json").read_text())["runs"]
    assert {domain.row_label("products", "mixcse", r["settings"]) for r in runs} == {"mixcse, shipped recipe"}
    assert domain.main(["label-budget", "--results", str(tmp_path / "label_budget.json")]) == 0
    written = json.loads((tmp_path / "label_budget.json").read_text())["domains"]["products"]
    assert written["seeds"] == [0, 1] and set(written["picks"]) == {"4", "8", "all"}
    assert [len(p) for p in written["picks"].values()] == [6, 6, 2]  # 3 subsamples a seed; all pairs once
    for run, chosen in zip(sorted(runs, key=lambda r: r["seed"]), written["picks"]["all"]):
        summary = json.loads((domain.CACHE / run["key"].replace("|", "_") / "summary.json").read_text())
        assert (chosen["step"], chosen["alpha"]) == (summary["best_step"], summary["best_alpha"])
    text = domain.render_label_budget()
    assert "**products**" in text and "| all | 2 |" in text and "within the seed spread" in text
