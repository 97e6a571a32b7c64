"""benchmarks/domain_adaptation.py on a tiny model and a tiny BEIR folder: run keys, the test curve over every
evaluated checkpoint (``--test-curve``), and rows kept apart by the settings that differ."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from benchmarks import domain_adaptation as domain
from conftest import write_tiny_beir
from mixcse.evaluation.retrieval import load_beir
from mixcse.sentence_encoder import SentenceEncoder


def test_keys_name_only_the_settings_that_differ_from_the_defaults():
    assert domain.Run("minilm", "mixcse", 0, "sentence").key == "minilm-mixcse-sentence-t0.05-s200-b64-seed0"
    run = domain.Run("minilm", "mixcse", 1, "sentence", batch_size=128, learning_rate=3e-6, mix_lambda=0.5,
                     max_length=128, eval_steps=100, select_docs=1000)
    assert run.key == "minilm-mixcse-sentence-t0.05-s200-b128-lr3e-06-lam0.5-len128-every100-docs1000-seed1"
    config = run.train_config(Path("out"), None)
    assert (config["lam"], config["max_seq_length"], config["learning_rate"], config["batch_size"]) == (
        0.5, 128, 3e-6, 128)
    assert "lam" not in domain.Run("minilm", "mixcse", 0, "sentence").train_config(Path("out"), None)
    assert domain.text_of(asdict(run)) == ("sentence, lr 3e-06, λ 0.5, length 128, batch 128, "
                                           "selection sub-corpus +1000")


def test_an_empty_cache_is_restored_from_the_committed_results_and_a_deleted_run_stays_deleted(tmp_path,
                                                                                                   monkeypatch):
    import json
    import shutil

    monkeypatch.setattr(domain, "CACHE", tmp_path / "cache")
    old = {"backbone": "minilm", "preset": "simcse", "seed": 2, "segment": "sentence", "temperature": 0.05,
           "steps": 200, "batch_size": 64, "eval_steps": 100, "positives": None,
           "test": {"ndcg@10": 1.0}}  # lacks ``select_docs`` and ``positives``: their defaults apply
    new = {**asdict(domain.Run("minilm", "mixcse", 0, "passage", mix_lambda=0.5)), "test": {"ndcg@10": 2.0}}
    results = tmp_path / "domain_adaptation.json"
    results.write_text(json.dumps({"zero_shot": {"minilm": {"ndcg@10": 64.5}}, "runs": [old, new]}))

    assert domain.restore_cache(results) == 3
    old_file = domain.CACHE / "minilm-simcse-sentence-t0.05-s200-b64-every100-seed2" / "record.json"
    assert json.loads(old_file.read_text()) == old
    assert json.loads((domain.CACHE / "zero-shot-minilm.json").read_text()) == {"ndcg@10": 64.5}
    new_file = domain.CACHE / domain.run_of(new).key / "record.json"
    new_file.write_text(json.dumps({**new, "test": {"ndcg@10": 3.0}}))  # a local record is never overwritten
    shutil.rmtree(old_file.parent)  # deleted to be trained again: not brought back
    assert domain.restore_cache(results) == 0
    assert not old_file.exists() and json.loads(new_file.read_text())["test"] == {"ndcg@10": 3.0}
    assert domain.restore_cache(tmp_path / "missing.json") == 0
    unset = {**old, "select_docs": None}  # no --select-docs: the library's default sub-corpus (1,000)
    assert domain.run_of(unset).key.endswith("-every100-docs1000-seed2")
    assert domain.text_of(unset).endswith("selection sub-corpus +1000")


def test_test_curve_scores_every_evaluated_checkpoint(tiny_bert, tmp_path, monkeypatch):
    beir = write_tiny_beir(tmp_path / "beir")
    monkeypatch.setattr(domain, "SCIFACT", beir)
    monkeypatch.setattr(domain, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(domain, "backbone_path", lambda backbone: str(tiny_bert))
    monkeypatch.setattr(domain, "BACKBONES", {"tiny": {"pooler": "cls", "learning_rate": 1e-3}})
    test_data = load_beir(beir, "test")
    zero = domain.test_scores(SentenceEncoder.load(tiny_bert, pooler="cls_before_pooler"), test_data)
    run = domain.Run("tiny", "mixcse", 0, "sentence", steps=4, batch_size=16, eval_steps=2, select_docs=5,
                     max_length=16)
    record = domain.run_one(run, test_data, zero, threads=None, curve=True)

    assert [p["step"] for p in record["test_curve"]] == [0, 2, 4]
    assert record["test_curve"][0] == {"step": 0, **{m: zero[m] for m in domain.METRICS}}
    assert record["test_last_step"] == record["test_curve"][-1]
    assert not (tmp_path / "cache" / run.key / "run" / "candidates").exists()  # scored, then removed
    kept = next(p for p in record["test_curve"] if p["step"] == record["selected_step"])
    assert kept == {"step": record["selected_step"], **{m: record["test"][m] for m in domain.METRICS}}
    # The last point is the model of an independent run without selection (best/ = its last step): the candidates
    # are the trained steps' own weights, and saving them changes nothing in training.
    plain = domain.run_one(domain.Run("tiny", "mixcse", 0, "sentence", steps=4, batch_size=16, eval_steps=4,
                                      select_docs=5, max_length=16, learning_rate=1e-3), test_data, zero, None,
                           test_last=True)
    assert plain["test_last_step"]["step"] == 4
    for metric in domain.METRICS:
        assert record["test_curve"][-1][metric] == pytest.approx(plain["test_last_step"][metric], abs=1e-9)
    # Runs that differ in a setting (here the learning rate and the selection cadence) are rows of their own.
    rows = domain.summarise({"tiny": zero}, [record, plain])
    assert sorted((r["eval_steps"], r["segment"]) for r in rows) == [
        (2, "sentence, length 16, batch 16, selection sub-corpus +5"),
        (4, "sentence, lr 0.001, length 16, batch 16, selection sub-corpus +5")]
    assert record["code"] and record["machine"]["logical_cpus"]  # where and at which commit it ran
    assert rows[0]["loss_at_end"][0] == pytest.approx(
        sum(loss for _, loss, _ in record["loss_curve"][-domain.LOSS_TAIL:]) / len(record["loss_curve"][-5:]))
    table = domain.render({"tiny": zero}, rows)
    assert table.count("| tiny | sentence, ") == 2


def test_a_run_cut_off_mid_training_resumes_from_its_checkpoint_and_records_what_an_uninterrupted_run_does(
        tiny_bert, tmp_path, monkeypatch, interrupted_at_call):
    from mixcse.training import step

    beir = write_tiny_beir(tmp_path / "beir")
    monkeypatch.setattr(domain, "SCIFACT", beir)
    monkeypatch.setattr(domain, "backbone_path", lambda backbone: str(tiny_bert))
    monkeypatch.setattr(domain, "BACKBONES", {"tiny": {"pooler": "cls", "learning_rate": 1e-3}})
    monkeypatch.setattr(domain, "SAVE_STEPS", 2)
    test_data = load_beir(beir, "test")
    zero = domain.test_scores(SentenceEncoder.load(tiny_bert, pooler="cls_before_pooler"), test_data)
    run = domain.Run("tiny", "mixcse", 0, "sentence", steps=6, batch_size=16, eval_steps=3, select_docs=5,
                     max_length=16)

    monkeypatch.setattr(domain, "CACHE", tmp_path / "whole")
    whole = domain.run_one(run, test_data, zero, threads=None)

    monkeypatch.setattr(domain, "CACHE", tmp_path / "cut")
    with interrupted_at_call(step, "contrastive_loss", 5):  # dies inside step 5, after the checkpoint at step 4
        domain.run_one(run, test_data, zero, threads=None)
    assert not (tmp_path / "cut" / run.key / "record.json").exists()
    assert domain.resumable_step(tmp_path / "cut" / run.key / "run") == 4
    resumed = domain.run_one(run, test_data, zero, threads=None)

    assert resumed["resumed_at_step"] == 4 and "resumed_at_step" not in whole
    for field in ("selected_step", "dev", "test", "loss_curve"):
        assert resumed[field] == whole[field], field
    assert domain.resumable_step(tmp_path / "cut" / run.key / "run") is None  # the finished run's checkpoint is gone


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
    assert "(0 up, 1 down of 2" in domain._diff(vs_mixcse)
    zero = rows["simcse"]["ndcg@10_vs_zero_shot"]
    assert (zero["wins"], zero["losses"]) == (0, 1)  # seed 1 ties the start: neither up nor down
