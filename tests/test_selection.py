"""Checkpoint selection in training: the start model as a candidate, selectors, data policy, inference length."""

import json

import numpy as np
import pytest
import yaml

import mixcse
from conftest import write_tiny_beir
from mixcse.evaluation.pairs import PairsEvaluator, read_pairs
from mixcse.evaluation.selection import better
from mixcse.evaluation.sts import STSEvaluator
from mixcse.models.encoder import load_encoder
from mixcse.models.sentence_encoder import SentenceEncoder

pytestmark = pytest.mark.numeric  # rerun on other arithmetic paths (docs/development.md)


def tiny(tiny_bert, synthetic_data, out, **kw):
    cfg = {"model": str(tiny_bert), "train_file": str(synthetic_data["corpus"]), "output_dir": str(out),
           "data_dir": str(synthetic_data["data_dir"]), "batch_size": 16, "max_steps": 4, "eval_steps": 2,
           "log_steps": 2, "learning_rate": 1e-3, "max_seq_length": 16, "seed": 5}
    cfg.update(kw)
    return cfg


SENTENCES = ["t0w1 t0w2 the t1w3", "t5w5 a t6w6 t6w7", "t2w0 of t3w3"]


def test_start_model_is_shipped_when_training_only_makes_selection_worse(tiny_bert, synthetic_data, tmp_path,
                                                                        monkeypatch, capsys):
    scores = iter([50.0, 40.0, 30.0])  # step 0 (start), 2, 4: every training step is worse
    monkeypatch.setattr(STSEvaluator, "__call__", lambda self, encoder, **kw: {"spearman": next(scores)})
    out = tmp_path / "run"
    result = mixcse.train(tiny(tiny_bert, synthetic_data, out))
    assert (result.best_step, result.best_dev, result.raw_dev) == (0, 50.0, 50.0)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["start_won"] is True and summary["best_step"] == 0
    printed = capsys.readouterr()
    assert "decision: no step beat the start model's stsb_dev 50.00; best/ is the start model" in printed.out
    start = SentenceEncoder.load(tiny_bert, pooler="cls_before_pooler").encode(SENTENCES)
    shipped = SentenceEncoder.load(out / "best").encode(SENTENCES)
    np.testing.assert_allclose(shipped, start, atol=1e-6)  # the weights it started from, not the trained ones
    trained_state = __import__("torch").load(out / "checkpoint/state.pt", weights_only=False)["model"]
    encoder, _, _ = load_encoder(str(tiny_bert), pooler="cls")
    assert any(not np.allclose(v.numpy(), trained_state[k].numpy()) for k, v in encoder.state_dict().items()
               if k in trained_state and v.is_floating_point())  # training did move the weights


def test_a_better_checkpoint_replaces_the_start(tiny_bert, synthetic_data, tmp_path, monkeypatch):
    scores = iter([10.0, 40.0, 30.0])
    monkeypatch.setattr(STSEvaluator, "__call__", lambda self, encoder, **kw: {"spearman": next(scores)})
    result = mixcse.train(tiny(tiny_bert, synthetic_data, tmp_path / "run"))
    assert (result.best_step, result.best_dev, result.raw_dev) == (2, 40.0, 10.0)
    assert json.loads((tmp_path / "run/summary.json").read_text())["start_won"] is False


def test_save_candidates_keeps_every_scored_model_and_overwrite_removes_them(tiny_bert, synthetic_data, tmp_path,
                                                                            monkeypatch):
    scores = iter([10.0, 40.0, 30.0, 10.0, 40.0, 30.0])  # step 0 (start), 2, 4; twice
    monkeypatch.setattr(STSEvaluator, "__call__", lambda self, encoder, **kw: {"spearman": next(scores)})
    out = tmp_path / "run"
    cfg = tiny(tiny_bert, synthetic_data, out, save_candidates=True)
    mixcse.train(cfg)
    assert sorted(p.name for p in (out / "candidates").iterdir()) == ["step-0", "step-2", "step-4"]
    start = SentenceEncoder.load(tiny_bert, pooler="cls_before_pooler").encode(SENTENCES)
    candidate = {step: SentenceEncoder.load(out / f"candidates/step-{step}").encode(SENTENCES) for step in (0, 2, 4)}
    np.testing.assert_allclose(candidate[0], start, atol=1e-6)
    np.testing.assert_array_equal(candidate[2], SentenceEncoder.load(out / "best").encode(SENTENCES))  # kept: step 2
    assert not np.allclose(candidate[2], candidate[4], atol=1e-6)  # the steps' own weights, not one copy
    (out / "candidates/step-9").mkdir()  # a stale candidate of an earlier run: --overwrite clears the folder
    mixcse.train({**cfg, "save_candidates": False}, overwrite=True)
    assert not (out / "candidates").exists()


def test_better_ranks_nan_and_none_last():
    assert better(1.0, None) and better(1.0, float("nan")) and not better(float("nan"), 1.0)
    assert better(2.0, 1.0) and not better(1.0, 1.0) and better(1.0, 2.0, greater_is_better=False)


def test_explicit_data_dir_without_stsb_dev_is_an_error_before_anything_is_written(tiny_bert, synthetic_data,
                                                                                   tmp_path):
    out = tmp_path / "run"
    with pytest.raises(mixcse.MixCSEError, match="no STS-B dev file"):
        mixcse.train(tiny(tiny_bert, synthetic_data, out, data_dir=str(tmp_path / "nowhere")))
    assert not out.exists()


def test_no_dev_data_found_says_so_and_ships_the_last_step(tiny_bert, synthetic_data, tmp_path, monkeypatch,
                                                           capsys):
    monkeypatch.setenv("MIXCSE_DATA", str(tmp_path / "no-data-here"))
    cfg = tiny(tiny_bert, synthetic_data, tmp_path / "run")
    del cfg["data_dir"]
    result = mixcse.train(cfg)
    assert "no checkpoint selection, best/ will be the LAST step" in capsys.readouterr().err
    assert result.best_step == 4 and result.best_dev is None and result.select_metric is None


def test_select_on_test_split_is_refused():
    with pytest.raises(mixcse.MixCSEError, match="select_split test is refused"):
        mixcse.TrainConfig(model="m", train_file="f", output_dir="o", select_on="retrieval", select_data="d",
                           select_split="test").validate()


def test_resume_before_the_first_checkpoint_starts_from_step_0(tiny_bert, synthetic_data, tmp_path, capsys):
    out = tmp_path / "run"
    cfg = mixcse.TrainConfig(**tiny(tiny_bert, synthetic_data, out, select_on="none"))
    out.mkdir()  # what a run killed before its first save leaves: its own config and a few metrics
    (out / "config.yaml").write_text(yaml.safe_dump({"config": cfg.to_dict()}))
    (out / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n")
    result = mixcse.train(cfg, resume=True)
    assert "no checkpoint" in capsys.readouterr().err and result.steps == 4
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [2, 4]  # the stale record is gone


def test_resume_without_checkpoint_in_another_runs_folder_is_refused(tiny_bert, synthetic_data, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.yaml").write_text(yaml.safe_dump({"config": {"model": "something else"}}))
    with pytest.raises(mixcse.MixCSEError, match="no checkpoint"):
        mixcse.train(tiny(tiny_bert, synthetic_data, out), resume=True)
    assert [p.name for p in out.iterdir()] == ["config.yaml"]


def test_training_progress_prints_plain_lines_when_not_on_a_terminal(tiny_bert, synthetic_data, tmp_path, capsys):
    mixcse.train(tiny(tiny_bert, synthetic_data, tmp_path / "run", select_on="none"))
    err = capsys.readouterr().err
    assert "train: 4/4 steps (100%)" in err and "loss" in err and "elapsed" in err


def test_inference_length_of_the_start_model_travels_to_best(tiny_bert, synthetic_data, tmp_path):
    source = tmp_path / "source"
    encoder, tokenizer, _ = load_encoder(str(tiny_bert), pooler="avg")
    encoder.save(source, tokenizer, max_seq_length=24)  # a sentence-transformers dir that says 24
    mixcse.train(tiny(source, synthetic_data, tmp_path / "carried", select_on="none", max_seq_length=8))
    best = tmp_path / "carried" / "best"
    assert json.loads((best / "sentence_bert_config.json").read_text())["max_seq_length"] == 24
    assert SentenceEncoder.load(best).max_seq_length == 24
    mixcse.train(tiny(source, synthetic_data, tmp_path / "set", select_on="none", inference_max_seq_length=20))
    assert SentenceEncoder.load(tmp_path / "set" / "best").max_seq_length == 20


def test_pairs_selection(tiny_bert, synthetic_data, tmp_path):
    rows = ["sentence1\tsentence2\tscore"] + [f"{a}\t{b}\t{s}" for a, b, s in
                                               [("t0w1 t0w2", "t0w3 t0w4", 5), ("t0w1 t0w2", "t7w1 t7w2", 0),
                                                ("t3w1 t3w5", "t3w2 t3w4", 4), ("t3w1", "t5w5", 1)]]
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("\n".join(rows) + "\n")
    assert len(read_pairs(pairs)) == 4
    result = mixcse.train(tiny(tiny_bert, synthetic_data, tmp_path / "run", select_on="pairs",
                               select_data=str(pairs)))
    assert result.select_metric == "pairs_spearman" and result.raw_dev is not None
    records = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "pairs_spearman" in r] == [0, 2, 4]
    selector = PairsEvaluator([pairs])
    score = selector.primary(selector(SentenceEncoder.load(tmp_path / "run/best"), batch_size=128))
    assert score == pytest.approx(result.best_dev, abs=1e-6)


@pytest.mark.parametrize("text, message", [
    ("a\tb\t1\n", "needs at least two labelled pairs"),
    ("sentence1\tsentence2\tscore\nx\ty\tnot-a-number\nx\tz\t1\n", "is not a number"),
    ("x\ty\t1\nx\n", "expected sentence1, sentence2, label"),
    ("sentence1\tsentence2\tsimilar\nx\ty\t1\nx\tz\t0\n", "no label or score column"),
])
def test_bad_pairs_files(tmp_path, text, message):
    path = tmp_path / "pairs.tsv"
    path.write_text(text)
    with pytest.raises(mixcse.MixCSEError, match=message):
        read_pairs(path)


def test_select_on_pairs_without_data_is_an_error(tiny_bert, synthetic_data, tmp_path):
    with pytest.raises(mixcse.MixCSEError, match="needs select_data"):
        mixcse.train(tiny(tiny_bert, synthetic_data, tmp_path / "run", select_on="pairs"))
    assert not (tmp_path / "run").exists()


def test_retrieval_selection_in_training(tiny_bert, synthetic_data, tmp_path):
    beir = write_tiny_beir(tmp_path / "beir")
    result = mixcse.train(tiny(tiny_bert, synthetic_data, tmp_path / "run", select_on="retrieval",
                               select_data=str(beir), select_docs=5))
    assert result.select_metric == "train_ndcg@10" and 0 <= result.best_dev <= 100
    records = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if "train_ndcg@10" in r]
    assert [r["step"] for r in evals] == [0, 2, 4]
    assert all("recall@100" in r and r["n_queries"] == 20 for r in evals)  # the train split's 20 queries
    assert result.best_dev == max(r["train_ndcg@10"] for r in evals)
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    assert "train (20 queries, 25 of 40 documents" in summary["selection"]  # 20 relevant + 5 distractors


def test_retrieval_selection_refuses_the_test_split(tmp_path):
    from mixcse.evaluation.selection import build_selector

    beir = write_tiny_beir(tmp_path / "beir")
    with pytest.raises(mixcse.MixCSEError, match="test split is refused"):
        build_selector("retrieval", data_dir=None, select_data=str(beir), select_split="test")


def test_resume_of_an_early_stopped_run_does_not_train_on(tiny_bert, synthetic_data, tmp_path, monkeypatch):
    scores = iter([50.0, 40.0])  # start, step 2 (worse): patience 1 stops at step 2; no further call is allowed
    monkeypatch.setattr(STSEvaluator, "__call__", lambda self, encoder, **kw: {"spearman": next(scores)})
    cfg = tiny(tiny_bert, synthetic_data, tmp_path / "run", max_steps=8, early_stopping_patience=1)
    assert mixcse.train(cfg).steps == 2
    before = (tmp_path / "run/metrics.jsonl").read_text()
    assert mixcse.train(cfg, resume=True).steps == 2  # stays stopped: the selector is not called again
    assert (tmp_path / "run/metrics.jsonl").read_text() == before


def test_resume_survives_a_cut_off_metrics_line_and_refuses_another_world_size(tiny_bert, synthetic_data, tmp_path):
    import torch

    cfg = tiny(tiny_bert, synthetic_data, tmp_path / "run", select_on="none")
    mixcse.train(cfg)
    metrics = tmp_path / "run/metrics.jsonl"
    metrics.write_text(metrics.read_text() + '{"step": 5, "loss": 0.3')  # killed mid-write
    assert mixcse.train(cfg, resume=True).steps == 4
    assert all(json.loads(line) for line in metrics.read_text().splitlines())
    state = torch.load(tmp_path / "run/checkpoint/state.pt", weights_only=False)
    state["rng"] = state["rng"] * 2  # as if written by two processes
    torch.save(state, tmp_path / "run/checkpoint/state.pt")
    with pytest.raises(mixcse.MixCSEError, match="written by 2 process"):
        mixcse.train(cfg, resume=True)


def test_overwrite_replaces_only_mixcse_outputs(tiny_bert, synthetic_data, tmp_path):
    cfg = tiny(tiny_bert, synthetic_data, tmp_path / "run", select_on="none")
    mixcse.train(cfg)
    (tmp_path / "run/README.md").write_text("my notes")  # the user's, not mixcse's (mixcse writes best/README.md)
    mixcse.train(cfg, overwrite=True)
    assert (tmp_path / "run/README.md").read_text() == "my notes" and (tmp_path / "run/best/README.md").exists()


def test_tab_separated_pairs_keep_quotes_as_text(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text('"Quoted start of a sentence\tA cat\t4.0\n"Hi," she said\tHello\t3\n')
    pairs = read_pairs(path)
    assert pairs.a == ['"Quoted start of a sentence', '"Hi," she said'] and list(pairs.scores) == [4.0, 3.0]
