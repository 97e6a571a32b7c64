"""Experiment tracking: TensorBoard event files and offline W&B runs hold what metrics.jsonl holds."""

import json

import pytest

import mixcse
from mixcse.errors import ConfigError
from mixcse.training.tracking import flat_config, parse_report_to


def tiny(tiny_bert, synthetic_data, out, **kw):
    return {"model": str(tiny_bert), "train_file": str(synthetic_data["corpus"]), "output_dir": str(out),
            "data_dir": str(synthetic_data["data_dir"]), "batch_size": 16, "max_steps": 4, "eval_steps": 2,
            "log_steps": 2, "max_seq_length": 16, "seed": 1, **kw}


def test_report_to_parsing():
    assert parse_report_to("none") == [] and parse_report_to("tensorboard, wandb") == ["tensorboard", "wandb"]
    for bad in ("", "mlflow", "tensorboard,comet"):
        with pytest.raises(ConfigError, match="report_to"):
            parse_report_to(bad)
    assert flat_config({"config": {"lr": 1e-5, "lam": None}, "world_size": 1}) == {
        "config.lr": 1e-5, "config.lam": "null", "world_size": 1}


def test_tensorboard_event_file_holds_every_logged_scalar(tiny_bert, synthetic_data, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    mixcse.train(tiny(tiny_bert, synthetic_data, out, report_to="tensorboard"))
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    events = EventAccumulator(str(out / "runs")).Reload()
    tags = set(events.Tags()["scalars"])
    for name in ("loss", "simcse_loss", "lr", "pos_cos", "neg_cos", "mix_cos", "anchor_grad_norm",
                 "sentences_per_second"):
        assert f"train/{name}" in tags, name
        logged = [(r["step"], r[name]) for r in records if "loss" in r]
        assert [(e.step, pytest.approx(e.value, rel=1e-6)) for e in events.Scalars(f"train/{name}")] == logged
    assert [(e.step, pytest.approx(e.value, rel=1e-6)) for e in events.Scalars("eval/stsb_dev")] == \
        [(r["step"], r["stsb_dev"]) for r in records if "stsb_dev" in r]
    plugins = EventAccumulator(str(out / "runs")).Reload().PluginTagToContent("hparams")
    assert any(b"config.learning_rate" in content for content in plugins.values())  # the config as hparams


def test_wandb_offline_run_is_written(tiny_bert, synthetic_data, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "run"
    mixcse.train(tiny(tiny_bert, synthetic_data, out, report_to="wandb", select_on="none"))
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    (log,) = runs[0].glob("run-*.wandb")  # the run's records (protobuf): history keys and config are in it
    content = log.read_bytes()
    for key in (b"train/loss", b"train/mix_cos", b"config.learning_rate"):
        assert key in content, key


def test_a_resumed_run_keeps_the_checkpoint_steps_events(tiny_bert, synthetic_data, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = tiny(tiny_bert, synthetic_data, tmp_path / "run", report_to="tensorboard")
    mixcse.train(cfg)
    mixcse.train(cfg, resume=True)  # resumes at the final checkpoint (step 4): nothing after it to purge
    events = EventAccumulator(str(tmp_path / "run/runs")).Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [2, 4]
    assert [e.step for e in events.Scalars("eval/stsb_dev")] == [0, 2, 4]
