import gzip

import numpy as np
import pytest

from mixcse.data.documents import read_segments
from mixcse.data.loader import BatchPlan
from mixcse.errors import ConfigError, DataError
from mixcse.losses import PRESETS
from mixcse.training.config import TrainConfig, build_config, load_recipe, parse_overrides

BASE = {"model": "m", "train_file": "t.txt", "output_dir": "o"}


def lines_of(path, **kwargs) -> list[str]:
    """A plain text file's training segments: every non-blank line."""
    return read_segments(path, segment="line", min_words=1, **kwargs)[0]


def test_overrides_are_typed_yaml_scalars():
    parsed = parse_overrides(["learning_rate=3e-5", "dedupe=true", "max_steps=null", "loss=simcse"])
    assert {k: v for k, v in parsed.items() if k != "learning_rate"} == {
        "dedupe": True, "max_steps": None, "loss": "simcse"}
    assert build_config(BASE | parsed).learning_rate == 3e-5  # YAML 1.1 keeps "3e-5" a string; config reads it
    cfg = build_config(BASE | {"learning_rate": 1, "lam": 0.3})  # an int is a fine float
    assert cfg.learning_rate == 1.0 and isinstance(cfg.learning_rate, float)
    assert cfg.objective().lam == 0.3


@pytest.mark.parametrize("values, message", [
    ({"learnig_rate": 1e-5}, "did you mean 'learning_rate'"),
    ({"batch_size": "64"}, "must be int"),
    ({"batch_size": 1.5}, "must be int"),
    ({"dedupe": "yes"}, "must be bool"),
    ({"loss": "infonce"}, "loss must be one of"),
    ({"pooler": "max"}, "pooler must be one of"),
    ({"lam": 1.5}, "lam must be in"),
    ({"precision": "int8"}, "precision must be one of"),
    ({"batch_size": 1}, "batch_size must be >= 2"),
])
def test_bad_config_is_one_clear_error(values, message):
    with pytest.raises(ConfigError, match=message):
        build_config(BASE | values)


def test_length_buckets_default_per_device():
    assert TrainConfig().forward_buckets("cpu") == 4  # less padding: faster on CPU
    assert TrainConfig().forward_buckets("cuda") == 1  # per-slice syncs and launches: slower on a GPU
    assert TrainConfig(length_buckets=2).forward_buckets("cuda") == 2
    with pytest.raises(ConfigError, match="length_buckets"):
        build_config({"model": "m", "train_file": "f", "output_dir": "o", "length_buckets": 0}).validate()


def test_presets_are_named_and_overridable(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: m\ntrain_file: t\noutput_dir: o\nloss: mixcse-wo-sg\n")
    cfg = load_recipe(recipe, ["directions=1"])
    obj = cfg.objective()
    assert (obj.lam, obj.mix_grad, obj.directions) == (0.2, "through", 1)
    assert {"simcse", "mixcse", "mixcse-single", "mixcse-wo-sg"} <= set(PRESETS)
    assert PRESETS["simcse"].lam is None and PRESETS["mixcse-single"].directions == 1
    with pytest.raises(ConfigError, match="recipe not found"):
        load_recipe(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_recipe(tmp_path / "list.yaml")


def test_recipes_in_repo_are_valid():
    from pathlib import Path

    recipes = sorted(Path(__file__).resolve().parents[1].glob("recipes/**/*.yaml"))
    assert len(recipes) >= 5
    for path in recipes:
        cfg = load_recipe(path)
        assert isinstance(cfg, TrainConfig)
    paper = load_recipe(Path(__file__).resolve().parents[1] / "recipes/mixcse-bert-base.yaml")
    assert (paper.batch_size, paper.learning_rate, paper.max_seq_length, paper.epochs, paper.eval_steps) == (
        64, 3e-5, 32, 1, 125)
    assert (paper.pooler, paper.mlp_only_train, paper.objective().lam) == ("cls", True, 0.2)


def test_read_sentences_plain_gz_blank_dedupe(tmp_path):
    text = "first one\n\n  second  \nfirst one\n\n"
    (tmp_path / "a.txt").write_text(text)
    with gzip.open(tmp_path / "a.txt.gz", "wt") as fh:
        fh.write(text)
    assert lines_of(tmp_path / "a.txt") == ["first one", "second", "first one"]
    assert lines_of(tmp_path / "a.txt.gz", dedupe=True) == ["first one", "second"]
    assert lines_of(tmp_path / "a.txt", max_sentences=2) == ["first one", "second"]


def test_read_sentences_bad_input(tmp_path):
    with pytest.raises(DataError, match="not found"):
        lines_of(tmp_path / "nope.txt")
    (tmp_path / "empty.txt").write_text("\n \n")
    with pytest.raises(DataError, match="no sentences"):
        lines_of(tmp_path / "empty.txt")
    (tmp_path / "latin1.txt").write_bytes("ok\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin1.txt:2: not UTF-8"):
        lines_of(tmp_path / "latin1.txt")
    (tmp_path / "bin.txt").write_bytes(b"\x00\x01\x02")
    with pytest.raises(DataError, match="not a text file"):
        lines_of(tmp_path / "bin.txt")
    (tmp_path / "fake.gz").write_text("not gzip")
    with pytest.raises(DataError, match="cannot read"):
        lines_of(tmp_path / "fake.gz")


def test_batch_plan_is_seeded_and_covers_each_epoch():
    plan = BatchPlan(103, 10, seed=7)
    assert plan.steps_per_epoch == 10  # the last 3 sentences of an epoch are dropped
    epoch0 = np.concatenate([plan.indices(s) for s in range(10)])
    assert len(set(epoch0.tolist())) == 100
    again = BatchPlan(103, 10, seed=7)
    assert all((plan.indices(s) == again.indices(s)).all() for s in range(25))
    assert not (plan.indices(10) == plan.indices(0)).all()  # a new permutation per epoch
    assert not (BatchPlan(103, 10, seed=8).indices(0) == plan.indices(0)).all()
    used = plan.used_indices(3)
    assert set(used.tolist()) == set(np.concatenate([plan.indices(s) for s in range(3)]).tolist())
    with pytest.raises(DataError, match="fewer than one batch"):
        BatchPlan(5, 10, seed=0)
