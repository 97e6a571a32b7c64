"""benchmarks/domain_adaptation.py on a tiny model and a tiny BEIR folder: run keys, the test curve over every
evaluated checkpoint (``--test-curve``), and rows kept apart by the settings that differ."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from mixcse.encoder import SentenceEncoder
from mixcse.evaluation.retrieval import load_beir
from test_selection import write_tiny_beir

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
domain = pytest.importorskip("domain_adaptation")


def test_keys_name_only_the_settings_that_differ_from_the_defaults():
    assert domain.Run("minilm", "mixcse", 0, "sentence").key == "minilm-mixcse-sentence-t0.05-s200-b64-seed0"
    run = domain.Run("minilm", "mixcse", 1, "sentence", batch_size=128, learning_rate=3e-6, mix_lambda=0.5,
                     max_length=128)
    assert run.key == "minilm-mixcse-sentence-t0.05-s200-b128-lr3e-06-lam0.5-len128-seed1"
    config = run.train_config(Path("out"), None)
    assert (config["lam"], config["max_seq_length"], config["learning_rate"], config["batch_size"]) == (
        0.5, 128, 3e-6, 128)
    assert "lam" not in domain.Run("minilm", "mixcse", 0, "sentence").train_config(Path("out"), None)
    assert domain.text_of(asdict(run)) == "sentence, lr 3e-06, λ 0.5, length 128, batch 128"


def test_a_fresh_cache_is_restored_from_the_committed_results_without_overwriting(tmp_path, monkeypatch):
    import json

    monkeypatch.setattr(domain, "CACHE", tmp_path / "cache")
    old = {"backbone": "minilm", "preset": "simcse", "seed": 2, "segment": "sentence", "temperature": 0.05,
           "steps": 200, "batch_size": 64, "eval_steps": 100, "select_docs": 500, "positives": None,
           "test": {"ndcg@10": 1.0}}  # written before ``positives`` existed: its default applies
    new = {**asdict(domain.Run("minilm", "mixcse", 0, "passage", mix_lambda=0.5)), "test": {"ndcg@10": 2.0}}
    results = tmp_path / "domain_adaptation.json"
    results.write_text(json.dumps({"zero_shot": {"minilm": {"ndcg@10": 64.5}}, "runs": [old, new]}))
    kept = domain.CACHE / domain.run_of(new).key / "record.json"
    kept.parent.mkdir(parents=True)
    kept.write_text(json.dumps({**new, "test": {"ndcg@10": 3.0}}))  # a newer local record wins

    assert domain.restore_cache(results) == 2
    assert json.loads((domain.CACHE / "minilm-simcse-sentence-t0.05-s200-b64-seed2" / "record.json").read_text()) == old
    assert json.loads(kept.read_text())["test"] == {"ndcg@10": 3.0}
    assert json.loads((domain.CACHE / "zero-shot-minilm.json").read_text()) == {"ndcg@10": 64.5}
    assert domain.restore_cache(results) == 0
    assert domain.restore_cache(tmp_path / "missing.json") == 0


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
        (2, "sentence, length 16, batch 16"), (4, "sentence, lr 0.001, length 16, batch 16")]
    table = domain.render({"tiny": zero}, rows)
    assert table.count("| tiny | sentence, ") == 2
