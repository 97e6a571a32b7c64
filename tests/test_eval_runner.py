"""evaluate() end to end on the tiny fixture: all 14 tasks, dedup, cache, JSON shape, tables, CLI, plots."""
import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest

from mixcse import cli
from mixcse.evaluation import (
    ALL_TASKS,
    alignment,
    evaluate,
    expand_tasks,
    format_tables,
    plot_alignment_uniformity,
    plot_training_cosines,
    sphere_stats,
    STSEvaluator,
    to_jsonable,
)
from mixcse.evaluation.senteval import default_data_dir, load_binary, load_stsb, load_trec, resolve_data_dir
from mixcse.evaluation.sts import row_cosine, spearman
from mixcse.models import inference

pytestmark = pytest.mark.numeric  # rerun on other arithmetic paths (docs/development.md)

FIXTURE = Path(__file__).parent / "fixtures" / "eval" / "downstream"
STS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"]
TRANSFER = ["MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC"]


def hashed(sentences, dim=16):
    """Random but deterministic embedding per sentence (seeded by its hash)."""
    rows = []
    for s in sentences:
        seed = int.from_bytes(hashlib.sha256(s.encode("utf-8")).digest()[:4], "little")
        rows.append(np.random.RandomState(seed).randn(dim))
    return np.asarray(rows, dtype=np.float32)


class Recorder:
    """An encoder object that records what it was asked to encode."""

    def __init__(self, fingerprint=None):
        self.calls = []
        if fingerprint:
            self.fingerprint = fingerprint

    def encode(self, sentences, batch_size=64):
        self.calls.append(list(sentences))
        return hashed(sentences)


@pytest.fixture(scope="module")
def full():
    enc = Recorder()
    return enc, evaluate(enc, tasks="all", data_dir=FIXTURE, mode="fasttest", verbose=False)


def test_smoke_all_tasks(full):
    _, res = full
    assert set(res) == {"sts", "transfer", "analysis", "settings"}
    for t in STS:
        assert -100 <= res["sts"][t]["spearman"] <= 100
    for t in STS[:5]:
        r = res["sts"][t]
        assert {"spearman", "pearson", "subsets", "wmean"} <= set(r)
        assert {"spearman", "pearson"} <= set(r["wmean"])
        assert all({"spearman", "pearson", "n"} <= set(v) for v in r["subsets"].values())
    assert res["sts"]["STS15"]["n"] == 5 * 4  # blank gold lines skipped
    assert res["sts"]["avg"] == pytest.approx(np.mean([res["sts"][t]["spearman"] for t in STS]))
    for t in TRANSFER:
        assert 0 <= res["transfer"][t]["acc"] <= 100
    assert 0 <= res["transfer"]["MRPC"]["f1"] <= 100
    assert res["transfer"]["avg"] == pytest.approx(np.mean([res["transfer"][t]["acc"] for t in TRANSFER]))
    a = res["analysis"]
    assert 0 <= a["alignment"] <= 4 and a["uniformity"] <= 0 and 0 < a["mean_angle"] <= a["max_angle"] <= 180
    s = res["settings"]
    assert s["mode"] == "fasttest" and s["kfold"] == 5 and s["classifier"]["classifier"] == "senteval-pytorch"
    assert set(ALL_TASKS) <= set(s["seconds"]) and "encode" in s["seconds"]
    json.dumps(to_jsonable(res), allow_nan=False)


def test_each_task_encoded_once_in_a_call_of_its_own(full):
    enc, res = full
    assert len(enc.calls) == len(ALL_TASKS)  # one call per task, each task's sentences once
    assert all(len(call) == len(set(call)) for call in enc.calls)
    assert len({s for call in enc.calls for s in call}) == res["settings"]["encoding"]["distinct_sentences"]
    assert res["settings"]["encoding"]["units"] == len(ALL_TASKS)


def test_callable_gets_length_sorted_batches():
    seen = []

    def enc(batch):
        seen.append(batch)
        return hashed(batch)

    res = evaluate(enc, tasks="STS12", data_dir=FIXTURE, batch_size=8, verbose=False)
    assert all(len(b) <= 8 for b in seen)
    lengths = [len(s.split()) for b in seen for s in b]
    assert lengths == sorted(lengths, reverse=True)
    again = evaluate(hashed, tasks="STS12", data_dir=FIXTURE, batch_size=1000, verbose=False)
    assert again["sts"]["STS12"]["spearman"] == pytest.approx(res["sts"]["STS12"]["spearman"])


def test_cache_reused_only_with_fingerprint(tmp_path):
    enc = Recorder(fingerprint="fake-v1")
    first = evaluate(enc, tasks="sts", data_dir=FIXTURE, cache_dir=tmp_path, verbose=False)
    n_sts = len(enc.calls)
    second = evaluate(enc, tasks="sts", data_dir=FIXTURE, cache_dir=tmp_path, verbose=False)
    assert len(enc.calls) == n_sts == 7  # the second run found every task in the cache
    assert second["settings"]["encoding"]["encoded"] == 0
    assert second["sts"]["STS12"] == first["sts"]["STS12"]
    third = evaluate(enc, tasks="sts,analysis", data_dir=FIXTURE, cache_dir=tmp_path, verbose=False)
    assert len(enc.calls) == n_sts + 1  # only the analysis task was new
    assert third["settings"]["encoding"]["cache_hits"] == sum(len(c) for c in enc.calls[:n_sts])
    assert third["sts"] == first["sts"]
    evaluate(enc, tasks="sts", data_dir=FIXTURE, cache_dir=tmp_path, batch_size=7, verbose=False)
    assert len(enc.calls) == 2 * n_sts + 1  # another batch size is another batch composition: not reused
    assert len(list(tmp_path.rglob("unit-*.npy"))) == 2 * n_sts + 1 and not list(tmp_path.rglob(".tmp-*"))
    nofp = tmp_path / "nofp"
    evaluate(Recorder(), tasks="STS13", data_dir=FIXTURE, cache_dir=nofp, verbose=False)
    assert not nofp.exists()


def test_task_scores_do_not_depend_on_the_other_tasks(tiny_bert, tmp_path):
    """A real model's embeddings move in the last bits with their batch-mates; a task's numbers must not."""
    from mixcse.models.sentence_encoder import SentenceEncoder

    enc = SentenceEncoder.load(tiny_bert, pooler="cls", device="cpu")
    kw = dict(data_dir=FIXTURE, mode="fasttest", batch_size=8, verbose=False)
    alone = evaluate(enc, tasks="TREC,STS12", **kw)
    together = evaluate(enc, tasks="all", **kw)
    cached = evaluate(enc, tasks="transfer,STS12", cache_dir=tmp_path, **kw)
    evaluate(enc, tasks="MR", cache_dir=tmp_path / "other", **kw)
    after_others = evaluate(enc, tasks="TREC,STS12", cache_dir=tmp_path, **kw)
    for res in (together, cached, after_others):
        assert res["transfer"]["TREC"] == alone["transfer"]["TREC"]
        assert res["sts"]["STS12"] == alone["sts"]["STS12"]
    # the premise, where this CPU's kernels show it: encoded among other sentences, the same sentences get other
    # float bits (on some CPUs the bits stay; the scores above must be equal either way)
    trec = [s for split in load_trec(FIXTURE).values() for s in split.sentences]
    mixed = enc.encode(load_binary(FIXTURE, "MR").sentences + trec, batch_size=8)[-len(trec):]
    assert mixed.shape == enc.encode(trec, batch_size=8).shape


def test_transfer_test_mode_and_torch_classifier(monkeypatch):
    from mixcse.evaluation.probes import SklearnLR

    monkeypatch.setattr(SklearnLR, "grid_inner", property(lambda self: [1.0]))  # 100 fits instead of 600
    res = evaluate(hashed, tasks="MR", data_dir=FIXTURE, mode="test", classifier="sklearn", verbose=False)
    assert len(res["transfer"]["MR"]["fold_acc"]) == 10 and res["settings"]["kfold"] == 10
    assert res["settings"]["classifier"]["classifier"] == "sklearn-converged"  # the canonical name is recorded
    res = evaluate(hashed, tasks="SST2,MRPC", data_dir=FIXTURE, mode="fasttest", classifier="torch", verbose=False)
    assert res["settings"]["classifier"]["classifier"] == "senteval-pytorch"
    assert 0 <= res["transfer"]["SST2"]["acc"] <= 100 and "f1" in res["transfer"]["MRPC"]


def test_stsb_dev_spearman_matches_direct_computation():
    ps = load_stsb(FIXTURE, "dev")
    expected = spearman(row_cosine(hashed(ps.a), hashed(ps.b)), ps.scores)
    evaluator = STSEvaluator.stsb_dev(FIXTURE)
    assert evaluator(hashed)["spearman"] == pytest.approx(expected)
    assert evaluator.primary(evaluator(Recorder())) == pytest.approx(expected)


def test_format_tables(full):
    _, res = full
    text = format_tables(res)
    assert "| STS12 | STS13 | STS14 | STS15 | STS16 | STS-B | SICK-R | Avg. |" in text
    assert "| MR | CR | SUBJ | MPQA | SST-2 | TREC | MRPC | Avg. |" in text
    assert f"{res['sts']['avg']:.2f}" in text and f"{res['transfer']['avg']:.2f}" in text
    assert "| Model |" in format_tables(res, label="fake")


def test_expand_tasks():
    assert expand_tasks("all") == list(ALL_TASKS)
    assert expand_tasks("transfer,STS-B") == ["STSBenchmark"] + TRANSFER
    assert expand_tasks(["sick-r", "sst-2", "analysis"]) == ["SICKRelatedness", "SST2", "analysis"]
    with pytest.raises(ValueError):
        expand_tasks("STS17")


def test_data_dir_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("MIXCSE_DATA", str(tmp_path))
    assert default_data_dir() == tmp_path
    (tmp_path / "downstream" / "STS").mkdir(parents=True)
    assert resolve_data_dir(tmp_path) == tmp_path / "downstream"  # the parent of downstream/ also works


def test_analysis_hand_checked():
    # pairs (1,0)-(0,1): squared distance 2
    assert alignment(np.array([[1.0, 0.0]]), np.array([[0.0, 3.0]])) == pytest.approx(2.0)
    # points at 0, 90 and 180 degrees: squared distances 2, 4, 2 and angles 90, 180, 90
    out = sphere_stats(np.array([[1.0, 0.0], [0.0, 2.0], [-1.0, 0.0]]))
    assert out["uniformity"] == pytest.approx(math.log((2 * math.exp(-4) + math.exp(-8)) / 3))
    assert out["max_angle"] == pytest.approx(180.0) and out["mean_angle"] == pytest.approx(120.0)


def test_plots(tmp_path):
    p = plot_alignment_uniformity([{"label": "a", "alignment": 0.3, "uniformity": -2.0},
                                   {"label": "b", "alignment": 0.2, "uniformity": -3.0}], tmp_path / "au.png")
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    m = tmp_path / "metrics.jsonl"
    m.write_text('{"step": 1, "pos_cos": 0.9, "neg_cos": 0.1, "mix_cos": 0.3}\n'
                 '{"step": 2, "loss": 1.0}\n{"step": 3, "pos_cos": 0.8}\n\n{"step": 4, "pos_c')
    p = plot_training_cosines({"run": m, "run2": m}, tmp_path / "cos.png")
    assert p.stat().st_size > 1000


def test_cli_writes_json_and_refuses_overwrite(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(inference, "open_encoder", lambda model, **kwargs: hashed)
    out = tmp_path / "res.json"
    argv = ["eval", "m", "--tasks", "sts", "--data-dir", str(FIXTURE), "--output", str(out)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "| STS12 |" in printed
    saved = json.loads(out.read_text())
    assert saved["settings"]["model"] == "m" and "STS12" in saved["sts"] and "seconds" in saved["settings"]
    assert cli.main(argv) != 0
    assert "exists" in capsys.readouterr().err
    assert cli.main(argv + ["--overwrite"]) == 0


def test_transfer_probes_in_worker_processes_give_the_same_results(full):
    _, one = full
    two = evaluate(Recorder(), tasks="transfer", data_dir=FIXTURE, mode="fasttest", verbose=False, workers=2)
    assert two["transfer"] == one["transfer"]
    assert two["settings"]["workers"] == 2 and set(two["settings"]["cpu_seconds"]) >= set(TRANSFER)
    with pytest.raises(ValueError, match="workers"):
        evaluate(Recorder(), tasks="transfer", data_dir=FIXTURE, workers=0, verbose=False)


def test_encoding_progress_off_a_terminal_is_a_plain_line(capsys):
    from mixcse.evaluation.embed import encode_raw

    sentences = [f"sentence number {i}" for i in range(5)]
    emb = encode_raw(lambda batch: np.ones((len(batch), 3)), sentences, batch_size=2, show_progress=True)
    err = capsys.readouterr().err
    assert emb.shape == (5, 3) and "encode: 5/5 sentences (100%)" in err
    encode_raw(lambda batch: np.ones((len(batch), 3)), sentences, batch_size=2)
    assert capsys.readouterr().err == ""


def test_eval_help_gives_the_data_dir_search_order_that_default_data_dir_follows(tmp_path, monkeypatch, capsys):
    from mixcse.cli import main

    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert ("default: $MIXCSE_DATA, then ./data, then the folder `mixcse data download` fills (~/.cache/mixcse/data)"
            in help_text)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("MIXCSE_DATA", raising=False)
    monkeypatch.setenv("MIXCSE_CACHE", str(tmp_path / "cache"))
    assert default_data_dir() is None
    (tmp_path / "cache" / "data").mkdir(parents=True)
    assert default_data_dir() == tmp_path / "cache" / "data"
    (work / "data").mkdir()
    assert default_data_dir() == Path("data")
    monkeypatch.setenv("MIXCSE_DATA", str(tmp_path / "elsewhere"))
    (tmp_path / "elsewhere").mkdir()
    assert default_data_dir() == tmp_path / "elsewhere"


def test_eval_without_data_says_how_to_get_it(tmp_path, monkeypatch, capsys):
    """No SentEval folder anywhere: one error line naming where it looked and the command that fetches the data;
    nothing is encoded (the model is never loaded)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MIXCSE_DATA", raising=False)
    monkeypatch.setenv("MIXCSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(inference, "open_encoder", lambda model, **kwargs: Recorder())
    assert cli.main(["eval", "some-model", "--tasks", "sts"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no SentEval data found (looked in data, ")
    assert str(tmp_path / "cache" / "data") in err[0] and "run `mixcse data download`" in err[0]


def test_bf16_precision_is_an_encoder_setting_that_evaluation_records(tiny_bert, tmp_path, capsys):
    from mixcse.models.sentence_encoder import SentenceEncoder

    fp32 = SentenceEncoder.load(tiny_bert, pooler="cls", device="cpu")
    bf16 = SentenceEncoder.load(tiny_bert, pooler="cls", device="cpu", precision="bf16")
    sentences = [s for split in load_trec(FIXTURE).values() for s in split.sentences][:40]
    a, b = fp32.encode(sentences, batch_size=8), bf16.encode(sentences, batch_size=8)
    assert b.dtype == np.float32 and not np.array_equal(a, b)  # autocast did run
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() > 0.99
    assert bf16.fingerprint != fp32.fingerprint  # an embedding cache never mixes the two
    kw = dict(tasks="STS12,TREC", data_dir=FIXTURE, mode="fasttest", batch_size=8, verbose=False)
    res = evaluate(str(tiny_bert), pooler="cls", precision="bf16", **kw)
    assert res["settings"]["precision"] == "bf16"
    assert res["sts"]["STS12"] == evaluate(bf16, **kw)["sts"]["STS12"]
    assert evaluate(fp32, **kw)["settings"]["precision"] == "fp32"
    with pytest.raises(ValueError, match="precision"):
        SentenceEncoder.load(tiny_bert, pooler="cls", device="cpu", precision="fp16")
