"""The training loop end to end on a tiny BERT built from a config: outputs, resume, bad input."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file

import mixcse
from mixcse.cli import main
from mixcse.evaluation.sts import STSEvaluator
from mixcse.models.sentence_encoder import SentenceEncoder
from mixcse.training import optim, rundir, step

pytestmark = pytest.mark.numeric  # rerun on other arithmetic paths (docs/development.md)


def tiny_config(tiny_bert, synthetic_data, out, **kw):
    cfg = {"model": str(tiny_bert), "train_file": str(synthetic_data["corpus"]), "output_dir": str(out),
           "data_dir": str(synthetic_data["data_dir"]), "batch_size": 16, "max_steps": 8, "eval_steps": 4,
           "log_steps": 2, "learning_rate": 1e-4, "max_seq_length": 16, "seed": 3}
    cfg.update(kw)
    return cfg


def test_train_writes_a_loadable_model_and_metrics(tiny_bert, synthetic_data, tmp_path):
    out = tmp_path / "run"
    result = mixcse.train(tiny_config(tiny_bert, synthetic_data, out, analysis_at_eval=True))
    assert result.steps == 8 and result.raw_dev is not None
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    assert resolved["config"]["loss"] == "mixcse" and resolved["objective"]["lam"] == 0.2
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if "loss" in r]
    assert [r["step"] for r in train_records] == [2, 4, 6, 8]
    for key in ("pos_cos", "neg_cos", "mix_cos", "simcse_loss", "anchor_grad_norm", "sentences_per_second", "lr"):
        assert all(np.isfinite(r[key]) for r in train_records), key
    evals = [r for r in records if "stsb_dev" in r]
    assert [r["step"] for r in evals] == [0, 4, 8]
    best = max(evals, key=lambda r: r["stsb_dev"])  # the first of equal scores: a later one must beat it strictly
    assert (result.best_step, result.best_dev, result.raw_dev) == (best["step"], best["stsb_dev"], evals[0]["stsb_dev"])
    for r in evals:  # analysis_at_eval: the paper's embedding-space figures at every evaluation
        assert 0 <= r["alignment"] <= 4 and r["uniformity"] <= 0 and 0 < r["max_angle"] <= 180
    # best/ is a HF model and a mixcse/sentence-transformers model with the test-time pooler.
    from transformers import AutoModel

    AutoModel.from_pretrained(out / "best")
    assert json.loads((out / "best/1_Pooling/config.json").read_text())["pooling_mode"] == "cls"
    enc = SentenceEncoder.load(out / "best")
    assert enc.pooler == "cls_before_pooler"
    emb = enc.encode(["t0w1 t0w2 t1w3", "t5w5 the t6w6"])
    assert emb.shape == (2, 64) and np.isfinite(emb).all()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["best_dev"] == max(r["stsb_dev"] for r in records if "stsb_dev" in r)  # the start included
    assert summary["start_won"] == (summary["best_step"] == 0) and summary["select_metric"] == "stsb_dev"


def test_existing_output_dir_is_protected(tiny_bert, synthetic_data, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    with pytest.raises(mixcse.MixCSEError, match="not empty"):
        mixcse.train(tiny_config(tiny_bert, synthetic_data, out))
    assert (out / "precious.txt").read_text() == "keep me" and len(list(out.iterdir())) == 1
    mixcse.train(tiny_config(tiny_bert, synthetic_data, out, max_steps=2, eval_steps=2), overwrite=True)
    assert (out / "best").is_dir() and (out / "precious.txt").exists()  # --overwrite replaces only mixcse's outputs


def _weights(path):
    return torch.load(path / "checkpoint/state.pt", weights_only=False)


@pytest.mark.parametrize("loss,mini_batch_size", [("mixcse", None), ("simcse", None), ("mixcse", 4)])
def test_resume_after_a_kill_equals_an_uninterrupted_run(tiny_bert, synthetic_data, tmp_path, interrupted_at_call,
                                                         loss, mini_batch_size):
    cfg = dict(max_steps=9, save_steps=3, eval_steps=4, loss=loss, mini_batch_size=mini_batch_size)
    full = tmp_path / "full"
    mixcse.train(tiny_config(tiny_bert, synthetic_data, full, **cfg))

    killed = tmp_path / "killed"
    with interrupted_at_call(step, "training_loss", 8):  # dies inside step 8, after the checkpoint at step 6
        mixcse.train(tiny_config(tiny_bert, synthetic_data, killed, **cfg))
    assert _weights(killed)["state"]["step"] == 6
    mixcse.train(tiny_config(tiny_bert, synthetic_data, killed, **cfg), resume=True)

    a, b = _weights(full), _weights(killed)
    assert a["state"]["step"] == b["state"]["step"] == 9
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    for k, v in a["optimizer"]["state"].items():
        assert torch.equal(v["exp_avg"], b["optimizer"]["state"][k]["exp_avg"])
    strip = lambda p: [{k: v for k, v in json.loads(line).items() if k != "sentences_per_second"}  # noqa: E731
                       for line in (p / "metrics.jsonl").read_text().splitlines()]
    assert strip(full) == strip(killed)  # nothing logged twice, nothing missing
    assert a["state"]["best_dev"] == b["state"]["best_dev"]


def test_a_kill_during_a_blend_search_resumes_to_the_same_best(tiny_bert, synthetic_data, tmp_path, monkeypatch,
                                                               interrupted_at_call):
    """A guard that refuses every checkpoint makes each evaluation search the blend weight; the run dies inside the
    search of step 8 (after the checkpoint of step 6) and, resumed, ships the same best/ bit for bit."""
    from test_adaptation import DEV, guard_falling_in_alpha, write_pairs

    from mixcse.training import selection

    dev = write_pairs(tmp_path / "dev.tsv", DEV)
    guard_falling_in_alpha(monkeypatch)
    cfg = dict(max_steps=9, save_steps=3, eval_steps=4, select_on="pairs", select_data=str(dev),
               guard_data="stsb_dev", guard_tolerance=6.2, data_dir=str(synthetic_data["data_dir"]))
    full = tmp_path / "full"
    mixcse.train(tiny_config(tiny_bert, synthetic_data, full, **cfg))
    full_summary = json.loads((full / "summary.json").read_text())
    assert sum(c["step"] == 8 and c["alpha"] != 1.0 for c in full_summary["candidates"]) >= 2  # step 8 searched

    killed = tmp_path / "killed"
    # blend calls: step 4's search (5 blends, its winner the last one scored), then step 8's: dies in its third
    with interrupted_at_call(selection, "blend", 8):
        mixcse.train(tiny_config(tiny_bert, synthetic_data, killed, **cfg))
    assert _weights(killed)["state"]["step"] == 6
    mixcse.train(tiny_config(tiny_bert, synthetic_data, killed, **cfg), resume=True)
    summary = json.loads((killed / "summary.json").read_text())
    assert {k: summary[k] for k in ("best_step", "best_alpha", "best_dev", "candidates", "decision")} == \
        {k: full_summary[k] for k in ("best_step", "best_alpha", "best_dev", "candidates", "decision")}
    a = load_file(str(full / "best" / "model.safetensors"))
    b = load_file(str(killed / "best" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def run_cli(args, capsys):
    code = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    return code, err


def test_cli_bad_input_is_one_line_and_nonzero(tiny_bert, synthetic_data, tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(tiny_config(tiny_bert, synthetic_data, tmp_path / "out")))
    cases = {
        "train_file=/nonexistent/corpus.txt": "training file not found",
        "model=/nonexistent/model": "model path does not exist",
        "batch_sise=8": "unknown config key 'batch_sise'",
        "batch_size=eight": "must be int",
    }
    for override, message in cases.items():
        code, err = run_cli(["train", str(recipe), override], capsys)
        assert code == 2 and len(err) == 1 and err[0].startswith("error:") and message in err[0], (override, err)
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"fine\nna\xefve\n")
    code, err = run_cli(["train", str(recipe), f"train_file={bad}"], capsys)
    assert code == 2 and "not UTF-8" in err[0] and "latin1.txt:2" in err[0]
    (tmp_path / "empty.txt").write_text("")
    code, err = run_cli(["train", str(recipe), f"train_file={tmp_path / 'empty.txt'}"], capsys)
    assert code == 2 and "no sentences" in err[0]
    assert not (tmp_path / "out").exists()  # nothing was written for any bad input


def test_non_finite_loss_stops_with_a_clear_error(tiny_bert, synthetic_data, tmp_path, capsys, monkeypatch):
    real_loss = step.training_loss

    def nan_loss(*args, **kwargs):
        out = real_loss(*args, **kwargs)
        out.loss = out.loss * float("nan")
        return out

    monkeypatch.setattr(step, "training_loss", nan_loss)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(tiny_config(tiny_bert, synthetic_data, tmp_path / "out")))
    code, err = run_cli(["train", str(recipe)], capsys)
    assert code == 2 and len(err) == 1 and "non-finite loss" in err[0]


def test_a_loss_gone_non_finite_between_log_steps_never_replaces_the_checkpoint(tiny_bert, synthetic_data,
                                                                                 tmp_path, monkeypatch):
    real_loss, calls = step.training_loss, []

    def nan_from_step_3(*args, **kwargs):
        out = real_loss(*args, **kwargs)
        calls.append(1)
        if len(calls) >= 3:
            out.loss = out.loss * float("nan")
        return out

    monkeypatch.setattr(step, "training_loss", nan_from_step_3)
    out = tmp_path / "out"  # checkpoints at steps 2 and 4, a log line only at 8: the NaN of step 3 shows at 4
    cfg = tiny_config(tiny_bert, synthetic_data, out, log_steps=8, save_steps=2, eval_steps=8)
    with pytest.raises(mixcse.MixCSEError, match="non-finite loss .* at step 4"):
        mixcse.train(cfg)
    saved = rundir.load_checkpoint(rundir.checkpoint_path(out))
    assert saved["state"]["step"] == 2
    assert all(torch.isfinite(v).all() for v in saved["model"].values() if v.is_floating_point())


def test_fp16_on_cpu_is_a_clear_error(tiny_bert, synthetic_data, tmp_path):
    with pytest.raises(mixcse.MixCSEError, match="fp16 needs a CUDA device"):
        mixcse.train(tiny_config(tiny_bert, synthetic_data, tmp_path / "o", precision="fp16"))


def test_bf16_autocast_trains(tiny_bert, synthetic_data, tmp_path, monkeypatch):
    from mixcse.models.encoder import Encoder

    training_dtypes = []
    real_forward = Encoder.forward

    def recording_forward(self, *args, **kwargs):
        pooled = real_forward(self, *args, **kwargs)
        if self.training:
            training_dtypes.append(pooled.dtype)
        return pooled

    monkeypatch.setattr(Encoder, "forward", recording_forward)
    result = mixcse.train(tiny_config(tiny_bert, synthetic_data, tmp_path / "o", precision="bf16", max_steps=4))
    assert result.steps == 4 and np.isfinite(result.best_dev)
    assert training_dtypes == [torch.bfloat16] * 4  # every training forward ran under bf16 autocast


def test_module_entry_point_exits_nonzero(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mixcse", "train", str(tmp_path / "missing.yaml")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.strip().startswith("error: recipe not found")


def test_early_stopping_and_best_selection(tiny_bert, synthetic_data, tmp_path, monkeypatch):
    scores = iter([10.0, 30.0, 20.0, 25.0, 5.0, 99.0])  # raw, then one per evaluation

    def scripted(self, encoder, **kwargs):
        return {"spearman": next(scores)}

    monkeypatch.setattr(STSEvaluator, "__call__", scripted)
    out = tmp_path / "es"
    result = mixcse.train(tiny_config(tiny_bert, synthetic_data, out, max_steps=12, eval_steps=2,
                                      early_stopping_patience=2))
    # evaluations at steps 2 (30, best), 4 (20), 6 (25): two without improvement -> stop at step 6
    assert (result.steps, result.best_step, result.best_dev, result.raw_dev) == (6, 2, 30.0, 10.0)
    assert json.loads((out / "summary.json").read_text())["best_step"] == 2


def test_precision_auto_on_cpu_follows_bf16_support(monkeypatch, capsys):
    cpu = torch.device("cpu")
    monkeypatch.setattr(optim, "cpu_supports_bf16", lambda: True)
    assert optim.resolve_precision("auto", cpu) == "bf16"
    monkeypatch.setattr(optim, "cpu_supports_bf16", lambda: False)
    assert optim.resolve_precision("auto", cpu) == "fp32"
    assert "precision auto -> fp32" in capsys.readouterr().err
    assert optim.resolve_precision("fp32", cpu) == "fp32"
    assert optim.resolve_precision("bf16", cpu) == "bf16"  # asked for explicitly: kept, with a warning
    assert "warning: precision bf16 on a CPU with neither" in capsys.readouterr().err
    monkeypatch.setattr(optim, "cpu_supports_bf16", lambda: True)
    assert optim.resolve_precision("bf16", cpu) == "bf16" and capsys.readouterr().err == ""


def test_resume_may_lengthen_the_run_and_records_every_changed_key(tiny_bert, synthetic_data, tmp_path, capsys):
    out = tmp_path / "run"
    cfg = tiny_config(tiny_bert, synthetic_data, out, max_steps=4, log_steps=1, select_on="none")
    mixcse.train(cfg)
    at_4 = _weights(out)["model"]
    longer = {**cfg, "max_steps": 5, "log_steps": 2}
    assert mixcse.train(longer, resume=True).steps == 5
    assert "changed config keys: max_steps (4 -> 5), log_steps (1 -> 2)" in capsys.readouterr().err
    # the learning rate of step 5 comes from the 5-step schedule (the 4-step one had decayed to 0 at step 4)
    assert any(not torch.equal(at_4[name], tensor) for name, tensor in _weights(out)["model"].items())
    history = [{"step": 4, "changed": {"max_steps": [4, 5], "log_steps": [1, 2]}}]
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    assert resolved["config"]["max_steps"] == 5 and resolved["total_steps"] == 5 and resolved["history"] == history
    assert "- from step 4: `max_steps` 4 → 5; `log_steps` 1 → 2" in (out / "best/README.md").read_text()
    mixcse.train(longer, resume=True)  # nothing changed this time: the history stays as it was
    assert yaml.safe_load((out / "config.yaml").read_text())["history"] == history
    assert "changed config keys" not in capsys.readouterr().err
