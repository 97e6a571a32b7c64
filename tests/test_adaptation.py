"""Adapting a strong start model: the forgetting guard, blends with the start model as selection candidates, mined
positives, false-negative exclusion and distillation in a training run, and their bad inputs."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from test_selection import tiny

import mixcse
from mixcse.errors import DataError, MixCSEError
from mixcse.evaluation.pairs import PairsEvaluator
from mixcse.evaluation.sts import STSEvaluator
from mixcse.models.merge import blend
from mixcse.training.levers.positives import mine_mutual_neighbours

pytestmark = pytest.mark.numeric  # rerun on other arithmetic paths (docs/development.md)


def write_pairs(path, rows):
    path.write_text("sentence1\tsentence2\tlabel\n" + "".join(f"{a}\t{b}\t{y}\n" for a, b, y in rows))
    return path


DEV = [("t0w1 t0w2", "t0w3 t0w4", 1), ("t0w1 t0w2", "t7w1 t7w2", 0), ("t3w1 t3w5", "t3w2 t3w4", 1),
       ("t3w1", "t5w5", 0)]


def scripted(monkeypatch, cls, key, values):
    """``cls``'s evaluators return the next of ``values`` as their primary metric."""
    values = iter(values)
    if cls is PairsEvaluator:
        monkeypatch.setattr(cls, "__call__", lambda self, encoder, **kw: {"dev": {"main": "ap", "ap": next(values)}})
    else:
        monkeypatch.setattr(cls, "__call__", lambda self, encoder, **kw: {key: next(values)})


def weights(folder) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def test_the_guard_refuses_a_candidate_that_forgets_and_says_so(tiny_bert, synthetic_data, tmp_path, monkeypatch,
                                                                capsys):
    from mixcse.cli.train import _report

    dev = write_pairs(tmp_path / "dev.tsv", DEV)
    scripted(monkeypatch, PairsEvaluator, "ap", [50.0, 60.0, 70.0])  # start, step 2, step 4: dev keeps rising
    scripted(monkeypatch, STSEvaluator, "spearman", [80.0, 79.8, 70.0])  # the guard: step 4 forgets
    out = tmp_path / "run"
    result = mixcse.train(tiny(tiny_bert, synthetic_data, out, select_on="pairs", select_data=str(dev),
                               guard_data="stsb_dev", guard_tolerance=0.5, interpolate="none"))
    assert (result.best_step, result.best_dev) == (2, 60.0)  # 70.0 at step 4 was refused
    summary = json.loads((out / "summary.json").read_text())
    (guard,) = summary["guards"]
    assert guard["start"] == 80.0 and guard["best"] == 79.8
    assert guard["refused"] == [{"step": 4, "alpha": 1.0}]
    assert [(c["step"], c["score"], c["guards"], c["accepted"]) for c in summary["candidates"]] == [
        (0, 50.0, [80.0], True), (2, 60.0, [79.8], True), (4, 70.0, [70.0], False)]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["guard_accepted"]) for r in records if "guard" in r] == [(0, True), (2, True), (4, False)]
    printed = capsys.readouterr()
    assert "step 4: pairs_ap 70.00 (best 60.00 @ 2); guard stsb_dev 70.00: refused, more than 0.5 below the start's " \
           "80.00" in printed.out + printed.err
    card = (out / "best" / "README.md").read_text()
    assert "guard" in card.lower() and "refused" in card
    _report(result)
    assert "guard stsb_dev (tolerance 0.5), start -> best: 80.00 -> 79.80; refused: step 4" in capsys.readouterr().out


def test_a_winning_blend_is_what_best_holds_and_training_goes_on_from_the_checkpoint(tiny_bert, synthetic_data,
                                                                                     tmp_path, monkeypatch):
    dev = write_pairs(tmp_path / "dev.tsv", DEV)
    # start; step 2: checkpoint, blend 0.5; step 4: checkpoint, blend 0.5 -- the step-2 blend wins
    scripted(monkeypatch, PairsEvaluator, "ap", [50.0, 55.0, 65.0, 60.0, 58.0])
    out = tmp_path / "blend"
    result = mixcse.train(tiny(tiny_bert, synthetic_data, out, select_on="pairs", select_data=str(dev),
                               interpolate=[0.5], save_candidates=True))
    assert (result.best_step, result.best_alpha, result.best_dev) == (2, 0.5, 65.0)
    start, checkpoint = weights(out / "candidates" / "step-0"), weights(out / "candidates" / "step-2")
    expected, best = blend(start, checkpoint, 0.5), weights(out / "best")
    assert best.keys() == expected.keys() and all(torch.equal(best[k], expected[k]) for k in best)
    assert not torch.equal(best["embeddings.word_embeddings.weight"], checkpoint["embeddings.word_embeddings.weight"])
    # scoring blends leaves the run itself untouched: the same final weights as a run without them
    monkeypatch.undo()
    plain = tmp_path / "plain"
    mixcse.train(tiny(tiny_bert, synthetic_data, plain, select_on="pairs", select_data=str(dev)))
    with_blends = tmp_path / "with-blends"
    mixcse.train(tiny(tiny_bert, synthetic_data, with_blends, select_on="pairs", select_data=str(dev),
                      interpolate="auto"))
    a = torch.load(plain / "checkpoint" / "state.pt", weights_only=False)["model"]
    b = torch.load(with_blends / "checkpoint" / "state.pt", weights_only=False)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    candidates = json.loads((with_blends / "summary.json").read_text())["candidates"]
    assert [c["alpha"] for c in candidates if c["step"] == 2] == [1.0, 0.25, 0.5, 0.75]


def test_mined_positives_are_mutual_nearest_neighbours():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(4, 16))
    emb = np.concatenate([base, base[:3] + 0.05 * rng.normal(size=(3, 16)), [base[3] * -1]])
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    texts = [f"text {i}" for i in range(len(emb))]
    pairs, report = mine_mutual_neighbours(texts, emb, threshold=0.9)
    # rows 0-2 and 4-6 are each other's nearest neighbours; 3 and 7 point opposite ways: no partner
    assert pairs == [("text 0", "text 4"), ("text 1", "text 5"), ("text 2", "text 6"), ("text 3", "text 3"),
                     ("text 4", "text 0"), ("text 5", "text 1"), ("text 6", "text 2"), ("text 7", "text 7")]
    assert report["with_mined_positive"] == 6 and len(report["sample"]) == 3
    with pytest.raises(DataError, match=r"no mutual nearest neighbours at cosine >= 0.9999 among 8 training "
                                        r"sentences \(the closest mutual pair: 0\.9"):
        mine_mutual_neighbours(texts, emb, threshold=0.9999)


def test_identical_text_is_never_a_mined_positive():
    emb = np.asarray([[1.0, 0.0], [1.0, 0.0], [0.6, 0.8], [0.61, 0.79]], dtype=np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    pairs, report = mine_mutual_neighbours(["a", "a", "b", "c"], emb, threshold=0.5)
    assert pairs == [("a", "a"), ("a", "a"), ("b", "c"), ("c", "b")] and report["with_mined_positive"] == 2


def test_start_model_signals_of_a_batch():
    from mixcse.training.levers.distillation import Distillation
    from mixcse.training.levers.false_negatives import FalseNegatives

    emb = np.asarray([[1.0, 0.0], [0.99, 0.141], [0.0, 1.0]], dtype=np.float32)

    class Start:
        def embeddings(self):
            return emb

    cfg = mixcse.TrainConfig(model="m", train_file="f", output_dir="o", false_negative_threshold=0.9,
                             distill_weight=0.5)
    masking, distill = FalseNegatives(cfg), Distillation(cfg)
    masking.prepare(Start())
    distill.prepare(Start())
    got = masking.signals(np.asarray([2, 0, 1]))
    assert got["exclude"].tolist() == [[True, False, False], [False, True, True], [False, True, True]]
    assert torch.equal(distill.signals(np.asarray([2, 0, 1]))["teacher"], torch.from_numpy(emb[[2, 0, 1]]))


@pytest.mark.parametrize("levers", [dict(positives="mined", mine_threshold=0.5),
                                    dict(false_negative_threshold=0.8, distill_weight=0.5)])
def test_a_run_with_the_start_model_levers_trains_and_logs_them(levers, tiny_bert, synthetic_data, tmp_path, capsys):
    out = tmp_path / "run"
    result = mixcse.train(tiny(tiny_bert, synthetic_data, out, **levers))
    assert result.steps == 4
    err = capsys.readouterr().err
    assert "start model: embedded 4,000 training sentences" in err
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r for r in records if "loss" in r]
    if "distill_weight" in levers:
        assert all(np.isfinite(r["distill_loss"]) and r["distill_loss"] > 0 for r in losses)
    else:
        summary = json.loads((out / "summary.json").read_text())
        assert summary["levers"]["positives"]["with_mined_positive"] > 0 and "positives mined:" in err


@pytest.mark.parametrize("keys, message", [
    (dict(guard_data="missing.tsv"), "guard_data not found: missing.tsv"),
    (dict(guard_data="stsb_dev", data_dir="nowhere"), "data_dir nowhere: no STS-B dev file"),
    (dict(max_seq_length=100000), "max_seq_length 100000 exceeds the 128 positions of"),
    (dict(interpolate="sometimes"), "interpolate must be a list of numbers, search, auto or none"),
    (dict(interpolate=[0.5, -1.0]), "interpolate must list blend weights > 0"),
    (dict(false_negative_threshold=2.0), "is a cosine similarity, in [-1, 1]"),
    (dict(guard_tolerance=-1.0), "'guard_tolerance' must be >= 0"),
])
def test_bad_adaptation_settings_fail_before_anything_is_written(keys, message, tiny_bert, synthetic_data,
                                                                 tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    with pytest.raises(MixCSEError, match=message.replace("(", r"\(").replace("[", r"\[")):
        mixcse.train(tiny(tiny_bert, synthetic_data, out, **keys))
    assert not out.exists()


def test_mining_that_finds_nothing_fails_before_anything_is_written(tiny_bert, synthetic_data, tmp_path,
                                                                   monkeypatch):
    from mixcse.training.levers import positives

    real = positives.nearest_neighbours
    monkeypatch.setattr(positives, "nearest_neighbours", lambda emb: (real(emb)[0], real(emb)[1] * 0 + 0.5))
    out = tmp_path / "run"
    with pytest.raises(DataError, match=r"positives: mined found no mutual nearest neighbours at cosine >= 0\.9 "
                                        r"among 4,000 training sentences \(the closest mutual pair: 0\.500\)"):
        mixcse.train(tiny(tiny_bert, synthetic_data, out, positives="mined"))
    assert not out.exists()


def test_a_pair_file_with_one_label_value_is_refused(tiny_bert, synthetic_data, tmp_path):
    ones = write_pairs(tmp_path / "ones.tsv", [(a, b, 1) for a, b, _ in DEV])
    out = tmp_path / "run"
    with pytest.raises(MixCSEError, match="only one label value"):
        mixcse.train(tiny(tiny_bert, synthetic_data, out, select_on="pairs", select_data=str(ones)))
    assert not out.exists()


def guard_falling_in_alpha(monkeypatch, slope=10.0):
    """Every candidate's scores as functions of (step, blend weight a): the selector gives 50 + 5 step a (blends of
    later checkpoints score higher) and the guard 80 - slope * a (80 for the start model): it falls linearly in a.
    The step and the weight in place are read off the selection room's entry and its model adapter."""
    from mixcse.training import selection

    now = {"step": 0, "alpha": 1.0}
    evaluate, use = selection.Selection.evaluate, selection.CandidateModel.use

    def observed_evaluate(self, step, model, state):
        now.update(step=step, alpha=1.0)
        return evaluate(self, step, model, state)

    def tracked_use(self, alpha):
        use(self, alpha)
        now["alpha"] = alpha

    monkeypatch.setattr(selection.Selection, "evaluate", observed_evaluate)
    monkeypatch.setattr(selection.CandidateModel, "use", tracked_use)
    monkeypatch.setattr(PairsEvaluator, "__call__", lambda self, encoder, **kw: {
        "dev": {"main": "ap", "ap": 50.0 + 5.0 * now["step"] * now["alpha"]}})
    monkeypatch.setattr(STSEvaluator, "__call__", lambda self, encoder, **kw: {
        "spearman": 80.0 - (slope * now["alpha"] if now["step"] > 0 else 0.0)})
    return now


def test_a_guard_that_refuses_every_step_gets_the_blend_weight_searched(tiny_bert, synthetic_data, tmp_path,
                                                                        monkeypatch, capsys):
    """The guard falls linearly in a; with tolerance 6.2 the boundary is a = 0.62 and every plain checkpoint (a = 1)
    fails. The search finds a passing weight within 0.05 of it in at most 5 extra scorings per refused checkpoint,
    best/ is bit for bit `mixcse merge START CKPT --weights 1-a a`, and the closing lines name the refusal."""
    from mixcse.cli import main as cli

    dev = write_pairs(tmp_path / "dev.tsv", DEV)
    guard_falling_in_alpha(monkeypatch)
    out = tmp_path / "run"
    result = mixcse.train(tiny(tiny_bert, synthetic_data, out, select_on="pairs", select_data=str(dev),
                               guard_data="stsb_dev", guard_tolerance=6.2, save_candidates=True))
    summary = json.loads((out / "summary.json").read_text())
    plain = [c for c in summary["candidates"] if c["step"] > 0 and c["alpha"] == 1.0]
    assert [c["accepted"] for c in plain] == [False, False]  # every plain checkpoint fails the guard
    for step in (2, 4):
        searched = [c["alpha"] for c in summary["candidates"] if c["step"] == step and c["alpha"] != 1.0]
        assert 1 <= len(searched) <= 5
    assert (result.best_step, summary["best_alpha"]) == (4, result.best_alpha)
    assert 0.62 - 0.05 <= result.best_alpha <= 0.62 and result.best_dev == pytest.approx(50 + 20 * result.best_alpha)
    assert summary["guards"][0]["best"] >= 80.0 - 6.2 and {"step": 4, "alpha": 1.0} in summary["guards"][0]["refused"]
    assert summary["decision"].startswith("step 4 scored 70.00 but stsb_dev fell to 70.00, more than 6.2 below "
                                          f"80.00; the blend a {result.best_alpha:.2f} keeps")
    printed = capsys.readouterr().out
    assert f"decision: {summary['decision']}" in printed and "candidates scored (the frontier):" in printed
    merged = tmp_path / "merged"
    monkeypatch.undo()
    assert cli(["merge", str(out / "candidates" / "step-0"), str(out / "candidates" / "step-4"), "--weights",
                repr(1 - result.best_alpha), repr(result.best_alpha), "--output", str(merged)]) == 0
    best, expected = weights(out / "best"), weights(merged)
    assert best.keys() == expected.keys() and all(torch.equal(best[k], expected[k]) for k in best)


def test_interpolate_none_switches_the_search_off_and_several_guards_must_all_pass(tiny_bert, synthetic_data,
                                                                                   tmp_path, monkeypatch):
    dev = write_pairs(tmp_path / "dev.tsv", DEV)
    keep = write_pairs(tmp_path / "keep.tsv", DEV)
    guard_falling_in_alpha(monkeypatch)
    out = tmp_path / "none"
    result = mixcse.train(tiny(tiny_bert, synthetic_data, out, select_on="pairs", select_data=str(dev),
                               guard_data="stsb_dev", guard_tolerance=6.2, interpolate="none"))
    summary = json.loads((out / "summary.json").read_text())
    assert result.best_step == 0 and all(c["alpha"] == 1.0 for c in summary["candidates"])
    assert summary["decision"].startswith("2 candidate(s) beat the start model's pairs_ap 50.00 but every one failed "
                                          "a guard (stsb_dev fell to 70.00")
    # a second guard on its own pairs: the pairs selector is scripted too, so it scores as the selection data does
    # (50 + 5 step a); with tolerance 100 it never refuses, the falling STS-B guard still decides
    out = tmp_path / "two"
    result = mixcse.train(tiny(tiny_bert, synthetic_data, out, select_on="pairs", select_data=str(dev),
                               guard_data=["stsb_dev", str(keep)], guard_tolerance=[6.2, 100.0]))
    summary = json.loads((out / "summary.json").read_text())
    assert [g["metric"] for g in summary["guards"]] == ["stsb_dev", "pairs_ap"]
    assert [g["tolerance"] for g in summary["guards"]] == [6.2, 100.0]
    assert all(len(c["guards"]) == 2 for c in summary["candidates"] if "guards" in c)
    assert 0.57 <= result.best_alpha <= 0.62
    card = (out / "best" / "README.md").read_text()
    assert "`stsb_dev`" in card and "`pairs_ap`" in card and summary["decision"] in card


def test_a_guard_whose_start_score_is_not_finite_is_refused(tiny_bert, synthetic_data, tmp_path, monkeypatch):
    dev = write_pairs(tmp_path / "dev.tsv", DEV)
    monkeypatch.setattr(STSEvaluator, "__call__", lambda self, encoder, **kw: {"spearman": float("nan")})
    with pytest.raises(MixCSEError, match=r"guard stsb_dev \(stsb_dev\): the start model scores nan on it"):
        mixcse.train(tiny(tiny_bert, synthetic_data, tmp_path / "run", select_on="pairs", select_data=str(dev),
                          guard_data="stsb_dev"))
