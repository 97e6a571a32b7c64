"""benchmarks.domain on tiny models and tiny data: run keys, the results JSON as the run cache (a recorded run is
never trained again), resuming a run cut off mid-training, test scores over checkpoints, the summaries' pairings,
and each subcommand end to end."""

from __future__ import annotations

import json
from argparse import Namespace
from dataclasses import asdict
from pathlib import Path

import pytest

from benchmarks import common, domain
from conftest import TOPICS, needs_shared, write_tiny_beir
from mixcse.evaluation.retrieval import load_beir
from mixcse.sentence_encoder import SentenceEncoder

TINY_RUN = ["--presets", "mixcse", "--seeds", "0", "--segments", "sentence", "--steps", "4", "--batch-size", "16",
            "--eval-steps", "2", "--select-docs", "5", "--max-length", "16"]


@pytest.fixture
def tiny_retrieval(tiny_bert, tmp_path, monkeypatch):
    """SciFact, the backbones and the cache replaced by a tiny BEIR folder, the tiny BERT and a temporary folder;
    returns (test data, the tiny BERT's zero-shot scores)."""
    beir = write_tiny_beir(tmp_path / "beir")
    monkeypatch.setattr(domain, "SCIFACT", beir)
    monkeypatch.setattr(domain, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(common, "backbone_path", lambda backbone: str(tiny_bert))
    monkeypatch.setattr(domain, "BACKBONES", {"tiny": {"pooler": "cls", "learning_rate": 1e-3}})
    test_data = load_beir(beir, "test")
    return test_data, domain.test_scores(SentenceEncoder.load(tiny_bert, pooler="cls_before_pooler"), test_data)


def flags(test_curve=False, test_last=False) -> Namespace:
    return Namespace(test_curve=test_curve, test_last=test_last)


def test_keys_name_only_the_settings_that_differ_from_the_defaults():
    assert domain.Run("minilm", "mixcse", 0, "sentence").key == "minilm-mixcse-sentence-t0.05-s200-b64-seed0"
    run = domain.Run("minilm", "mixcse", 1, "sentence", batch_size=128, learning_rate=3e-6, mix_lambda=0.5,
                     max_length=128, eval_steps=100, select_docs=1000)
    assert run.key == "minilm-mixcse-sentence-t0.05-s200-b128-lr3e-06-lam0.5-len128-every100-docs1000-seed1"
    config = run.train_config()
    assert (config["lam"], config["max_seq_length"], config["learning_rate"], config["batch_size"]) == (
        0.5, 128, 3e-6, 128)
    assert "lam" not in domain.Run("minilm", "mixcse", 0, "sentence").train_config()
    assert domain.text_of(asdict(run)) == ("sentence, lr 3e-06, λ 0.5, length 128, batch 128, "
                                           "selection sub-corpus +1000")
    # A setting a record lacks, or holds as null, takes its default.
    old = {"backbone": "minilm", "preset": "simcse", "seed": 2, "segment": "sentence", "temperature": 0.05,
           "steps": 200, "batch_size": 64, "eval_steps": 100, "positives": None, "select_docs": 500}
    assert domain.run_of(old).key == "minilm-simcse-sentence-t0.05-s200-b64-every100-seed2"
    assert domain.text_of(old) == "sentence"
    assert domain.similarity_key("mixcse", {**domain.DEFAULTS, "learning_rate": 3e-5}, 2) == (
        "mixcse|learning_rate=3e-05|seed2")


def test_retrieval_end_to_end_writes_json_and_table_and_never_trains_a_recorded_run_again(
        tiny_retrieval, tmp_path, monkeypatch):
    results, docs = tmp_path / "domain_adaptation.json", tmp_path / "docs"
    docs.mkdir()
    base = ["retrieval", "--results", str(results), "--docs", str(docs), "--backbones", "tiny"]
    assert domain.main(base + TINY_RUN + ["--test-curve"]) == 0

    written = json.loads(results.read_text())
    assert written["command"] == "python -m benchmarks.domain " + " ".join(base + TINY_RUN + ["--test-curve"])
    assert set(written) >= {"benchmark", "date", "machine", "zero_shot", "summary", "runs", "published_gpl", "data"}
    (record,) = written["runs"]
    assert [p["step"] for p in record["test_curve"]] == [0, 2, 4] and record["code"]
    run_dir = tmp_path / "cache" / domain.run_of(record).key
    assert (run_dir / "best").is_dir() and not (run_dir / "checkpoint").exists()  # best/ kept, not the optimiser
    assert not (run_dir / "candidates").exists()  # scored, then removed
    page = docs / "domain_adaptation_results.md"
    table = page.read_text()
    assert "| tiny | sentence, length 16, batch 16, selection sub-corpus +5 |" in table
    assert (docs / "domain_adaptation.png").exists()

    monkeypatch.setattr(domain, "retrieval_run", lambda *a: pytest.fail("a recorded run was trained again"))
    assert domain.main(base + TINY_RUN + ["--seeds", "0"]) == 0
    assert json.loads(results.read_text())["runs"] == [record]
    page.write_text("# hand-written head\n\n" + table.replace("| tiny |", "| stale |") + "\n\nhand-written tail\n")
    assert domain.main(["retrieval", "--report-only", "--results", str(results), "--docs", str(docs)]) == 0
    assert page.read_text() == "# hand-written head\n\n" + table + "\n\nhand-written tail\n"  # only the block is new


def test_test_curve_scores_every_evaluated_checkpoint_and_its_last_point_is_the_last_steps_model(
        tiny_retrieval, tmp_path):
    test_data, zero = tiny_retrieval
    run = domain.Run("tiny", "mixcse", 0, "sentence", steps=4, batch_size=16, eval_steps=2, select_docs=5,
                     max_length=16)
    record = domain.retrieval_run(run, tmp_path / "curve", test_data, zero, flags(test_curve=True))

    assert [p["step"] for p in record["test_curve"]] == [0, 2, 4]
    assert record["test_curve"][0] == {"step": 0, **{m: zero[m] for m in domain.METRICS}}
    assert record["test_last_step"] == record["test_curve"][-1]
    kept = next(p for p in record["test_curve"] if p["step"] == record["selected_step"])
    assert kept == {"step": record["selected_step"], **{m: record["test"][m] for m in domain.METRICS}}
    # An independent run without selection in between (best/ = its last step) ends on the same model: the
    # candidates are the trained steps' own weights, and saving them changes nothing in training.
    plain = domain.retrieval_run(domain.Run("tiny", "mixcse", 0, "sentence", steps=4, batch_size=16, eval_steps=4,
                                            select_docs=5, max_length=16, learning_rate=1e-3), tmp_path / "plain",
                                 test_data, zero, flags(test_last=True))
    assert plain["test_last_step"]["step"] == 4
    for metric in domain.METRICS:
        assert record["test_curve"][-1][metric] == pytest.approx(plain["test_last_step"][metric], abs=1e-9)
    # Runs that differ in a setting (here the learning rate and the selection cadence) are rows of their own.
    rows = domain.summarise({"tiny": zero}, [record, plain])
    assert sorted((r["eval_steps"], r["segment"]) for r in rows) == [
        (2, "sentence, length 16, batch 16, selection sub-corpus +5"),
        (4, "sentence, lr 0.001, length 16, batch 16, selection sub-corpus +5")]
    assert rows[0]["loss_at_end"][0] == pytest.approx(
        sum(loss for _, loss, _ in record["loss_curve"][-domain.LOSS_TAIL:]) / len(record["loss_curve"][-5:]))
    assert domain.render_retrieval({"tiny": zero}, rows).count("| tiny | sentence, ") == 2


def test_a_run_cut_off_mid_training_resumes_from_its_checkpoint_and_records_what_an_uninterrupted_run_does(
        tiny_retrieval, tmp_path, monkeypatch, interrupted_at_call):
    from mixcse.training import step

    test_data, zero = tiny_retrieval
    monkeypatch.setattr(domain, "SAVE_STEPS", 2)
    run = domain.Run("tiny", "mixcse", 0, "sentence", steps=6, batch_size=16, eval_steps=3, select_docs=5,
                     max_length=16)
    whole = domain.retrieval_run(run, tmp_path / "whole", test_data, zero, flags())

    records, saves = [], []
    train = lambda run, out: domain.retrieval_run(run, out, test_data, zero, flags())  # noqa: E731
    with interrupted_at_call(step, "contrastive_loss", 5):  # dies inside step 5, after the checkpoint at step 4
        domain.run_missing([(run.key, run)], records, lambda r: domain.run_of(r).key, train, lambda: saves.append(1))
    assert not records and not saves
    assert domain.resumable_step(tmp_path / "cache" / run.key) == 4
    domain.run_missing([(run.key, run)], records, lambda r: domain.run_of(r).key, train, lambda: saves.append(1))

    (resumed,) = records
    assert resumed["resumed_at_step"] == 4 and "resumed_at_step" not in whole and saves == [1]
    for field in ("selected_step", "dev", "test", "loss_curve"):
        assert resumed[field] == whole[field], field
    assert domain.resumable_step(tmp_path / "cache" / run.key) is None  # the finished run's checkpoint is gone


def test_summary_pairs_ablations_with_mixcse_and_counts_ups_and_downs():
    def record(preset, seed, ndcg, change, losses):
        return {**asdict(domain.Run("minilm", preset, seed, "sentence")), "start_won": False,
                "test": {"ndcg@10": ndcg, "recall@100": 90.0}, "dev": {"start": 70.0, "curve": [[200, 70.0 + change]]},
                "loss_curve": [[i, loss, loss] for i, loss in enumerate(losses)]}

    runs = [record("simcse", 0, 60.0, -1.0, [1.0] * 6), record("simcse", 1, 61.0, -1.0, [1.0] * 6),
            record("mixcse", 0, 62.0, -0.5, [9.0] + [2.0] * 5), record("mixcse", 1, 61.0, -0.5, [4.0] * 6),
            record("mixcse-wo-sg", 0, 61.0, -2.0, [3.0] * 6), record("mixcse-wo-sg", 1, 61.0, -1.5, [3.0] * 6)]
    rows = {r["preset"]: r for r in domain.summarise({"minilm": {"ndcg@10": 61.0, "recall@100": 90.0}}, runs)}

    assert "ndcg@10_vs_mixcse" not in rows["mixcse"] and "ndcg@10_vs_mixcse" not in rows["simcse"]
    vs_mixcse = rows["mixcse-wo-sg"]["ndcg@10_vs_mixcse"]
    assert (vs_mixcse["mean"], vs_mixcse["wins"], vs_mixcse["losses"], vs_mixcse["n"]) == (-0.5, 0, 1, 2)
    assert rows["mixcse-wo-sg"]["selection_change_vs_mixcse"]["mean"] == pytest.approx(-1.25)
    assert rows["mixcse"]["loss_at_end"][0] == pytest.approx(3.0)  # seeds' means of the last 5 logs: 2 and 4
    assert "(0 up, 1 down of 2" in domain.fmt_diff(vs_mixcse)
    zero = rows["simcse"]["ndcg@10_vs_zero_shot"]
    assert (zero["wins"], zero["losses"]) == (0, 1)  # seed 1 ties the start: neither up nor down


def write_pairs(path: Path, pairs: list[tuple[str, str, int]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("sentence1\tsentence2\tlabel\n" + "".join(f"{a}\t{b}\t{y}\n" for a, b, y in pairs))
    return path


def test_similarity_compare_and_sweep_share_the_cache_and_the_report(tiny_bert, synthetic_data, tmp_path,
                                                                    monkeypatch):
    """mixcse's row and a sentence-transformers baseline, 2 steps each, on topic-word questions."""
    data = tmp_path / "questions"
    same = [(" ".join(t[:4]), " ".join(t[4:8]), 1) for t in TOPICS] + [
        (" ".join(TOPICS[i][:4]), " ".join(TOPICS[i + 1][4:8]), 0) for i in range(7)]
    pairs = {name: write_pairs(data / f"{name}.tsv", same) for name in ("mqp_dev", "mqp_test", "rqe_test")}
    (data / "unlabeled.txt").write_text("\n".join(" ".join(t[i:i + 5]) for t in TOPICS for i in range(6)) + "\n")
    monkeypatch.setattr(domain, "DATA", data)
    monkeypatch.setattr(domain, "PAIRS", pairs)
    monkeypatch.setattr(domain, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(common, "DOWNSTREAM", synthetic_data["data_dir"])
    monkeypatch.setattr(common, "minilm_path", lambda: str(tiny_bert))
    results, docs = tmp_path / "similarity_adaptation.json", tmp_path / "docs"
    docs.mkdir()
    base = ["similarity", "--results", str(results), "--docs", str(docs), "--seeds", "0", "--in-process"]
    tiny = ["--set", "max_steps=2", "eval_steps=1", "batch_size=8", "learning_rate=1e-3"]

    assert domain.main(base + ["--methods", "mixcse", "mnrl"] + tiny) == 0
    written = json.loads(results.read_text())
    assert set(written["zero_shot"]) == {"mqp_dev_ap", "mqp_test_ap", "rqe_test_ap", "stsb_test"}
    assert [r["key"] for r in written["runs"]] == [
        "mixcse|batch_size=8,eval_steps=1,learning_rate=0.001,max_steps=2|seed0",
        "mnrl|batch_size=8,eval_steps=1,learning_rate=0.001,max_steps=2|seed0"]
    assert all(r["best_step"] in (0, 1, 2) and r["peak_rss_mb"] is None for r in written["runs"])
    assert written["recipe"] == domain.DEFAULTS and written["machines"] and written["code"]

    assert domain.main(base + ["--methods", "mixcse"] + tiny + ["--grid", "temperature=0.05,0.1"]) == 0
    sweep = json.loads(results.read_text())["sweep"]
    assert [r["settings"]["temperature"] for r in sweep] == [0.05, 0.1] and len(sweep) == 2
    monkeypatch.setattr(domain, "similarity_run", lambda *a: pytest.fail("a recorded run was trained again"))
    assert domain.main(base + ["--methods", "mixcse", "mnrl"] + tiny) == 0  # every row recorded already
    report = (docs / "similarity_adaptation_results.md").read_text()
    assert "| mixcse | 1 |" in report and "| mnrl | 1 |" in report and "## Exploration" in report
    assert (docs / "similarity_adaptation.png").exists()


@needs_shared(domain.DATA)
def test_main_job_records_the_runs_summary_and_report(tiny_bert, tmp_path):
    results = tmp_path / "main_job.json"
    assert domain.main(["main-job", "--results", str(results), "--set", f"model={tiny_bert}", "max_steps=2",
                        "eval_steps=1", "batch_size=8"]) == 0
    written = json.loads(results.read_text())
    assert written["recipe"] == domain.MAIN_JOB_RECIPE and written["summary"]["steps"] == 2
    assert any(line.startswith("start dev pairs AP") for line in written["report"]) and written["wall_seconds"] > 0


@pytest.mark.parametrize("argv", [["similarity", "--set", "max_steps"], ["similarity", "--methods", "nope"],
                                  ["retrieval", "--presets", "nope"], ["retrieval", "--seeds", "x"], []])
def test_bad_input_is_one_error_line_and_exit_code_2(argv, capsys):
    with pytest.raises(SystemExit) as exit:
        domain.main(argv)
    assert exit.value.code == 2
    assert ": error: " in capsys.readouterr().err.strip().splitlines()[-1]
