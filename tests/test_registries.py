"""A new evaluation task and a new adaptation lever are each one registration: a toy of each, registered through the
public functions, runs through `mixcse` and shows in `mixcse eval`'s tables, the results JSON, the model card and
summary.json, with nothing else changed."""

import json

import numpy as np
import pytest
import torch
import yaml
from test_selection import tiny

from mixcse.cli import main
from mixcse.errors import ConfigError
from mixcse.evaluation.evaluator import Evaluator, result_row
from mixcse.evaluation.tasks import register_task, unregister_task
from mixcse.training.config import load_recipe
from mixcse.training.levers import Lever, register_lever, unregister_lever
from mixcse.utils.tables import number


class ToyEvaluator(Evaluator):
    """The mean norm of two sentences' embeddings."""

    name = section = "toy"
    primary_metric = "mean_norm"
    description = "mean embedding norm of two sentences"

    def units(self):
        return {"toy": ["t0w1 t0w2", "t5w5 t6w6"]}

    def score(self, embeddings, encoder=None, **_):
        matrix = embeddings["toy"](["t0w1 t0w2", "t5w5 t6w6"])
        return {"mean_norm": float(np.linalg.norm(matrix, axis=1).mean())}

    @classmethod
    def protocol(cls, evaluators, context):
        return {"sentences": 2, "figure": "mean l2 norm"}

    @classmethod
    def table(cls, section, settings, label=None):
        return ["Toy: mean embedding norm", *result_row(["norm"], [number(section["mean_norm"])], label)]

    @classmethod
    def card(cls, section, settings):
        return ["Toy task: the mean embedding norm of two sentences.", "",
                *result_row(["norm"], [number(section["mean_norm"])], centred=True)]


@pytest.fixture
def toy_task():
    register_task("toy", lambda name, arguments: ToyEvaluator(), ToyEvaluator)
    yield
    unregister_task("toy")


def test_a_registered_task_runs_and_renders_itself_in_the_tables_json_and_card(toy_task, tiny_bert, tmp_path,
                                                                               capsys):
    from test_eval_card import model_dir_with_card

    best = model_dir_with_card(tiny_bert, tmp_path)
    out = tmp_path / "results.json"
    assert main(["eval", str(best), "--tasks", "toy", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    results = json.loads(out.read_text())
    norm = results["toy"]["mean_norm"]
    assert norm > 0 and results["settings"]["toy"] == {"sentences": 2, "figure": "mean l2 norm"}
    assert "Toy: mean embedding norm" in printed and f"{norm:.2f}" in printed
    card = (best / "README.md").read_text()
    assert "Toy task: the mean embedding norm of two sentences." in card and f"{norm:.2f}" in card


def test_an_unregistered_task_is_refused_again(tiny_bert, tmp_path, capsys):
    register_task("toy", lambda name, arguments: ToyEvaluator(), ToyEvaluator)
    unregister_task("toy")
    assert main(["eval", str(tiny_bert), "--tasks", "toy"]) == 2
    assert "unknown task 'toy'" in capsys.readouterr().err


class ToyLever(Lever):
    """Pulls each sentence's two views together with an extra mean squared distance, weighted by ``toy_pull``."""

    name = "toy"
    keys = {"toy_pull": (float | None, None)}
    renamed = {"toy_weight": "toy_pull"}

    @classmethod
    def active(cls, cfg):
        return cfg.toy_pull is not None

    @classmethod
    def check(cls, cfg):
        if cfg.toy_pull is not None and cfg.toy_pull < 0:
            raise ConfigError(f"toy_pull must be >= 0, got {cfg.toy_pull}")

    def prepare(self, start):
        self.sentences, self.batches = len(start.anchors), 0

    def signals(self, indices):
        self.batches += 1
        return {"toy_rows": torch.as_tensor(np.asarray(indices))}

    def loss_term(self, z1, z2, signals, objective, rows):
        assert len(signals["toy_rows"]) == z1.shape[0]
        rows = slice(None) if rows is None else rows
        term = (z1[rows] - z2[rows]).pow(2).sum() / z1.shape[0]
        return self.cfg.toy_pull * term, {"toy_loss": term.detach()}

    def report(self):
        return {"sentences": self.sentences, "batches": self.batches,
                "text": f"pulled the views together (weight {self.cfg.toy_pull:g}) over {self.batches} batches"}


@pytest.fixture
def toy_lever():
    register_lever(ToyLever)
    yield
    unregister_lever("toy")


def test_a_registered_lever_trains_and_reports_in_summary_card_and_report(toy_lever, tiny_bert, synthetic_data,
                                                                         tmp_path, capsys):
    out = tmp_path / "run"
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(tiny(tiny_bert, synthetic_data, out)))
    assert main(["train", str(recipe), "toy_weight=0.5"]) == 0  # the old name of the key still loads
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["levers"]["toy"] == {"sentences": 4000, "batches": 4,
                                        "text": "pulled the views together (weight 0.5) over 4 batches"}
    assert "lever toy: pulled the views together" in printed
    assert "**toy:** pulled the views together" in (out / "best" / "README.md").read_text()
    losses = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["toy_loss"] > 0 for r in losses if "loss" in r] == [True, True]
    assert yaml.safe_load((out / "config.yaml").read_text())["config"]["toy_pull"] == 0.5  # a top-level key


def test_a_lever_checks_its_keys_and_an_old_and_new_name_together_are_refused(toy_lever, tmp_path):
    base = {"model": "m", "train_file": "f", "output_dir": "o"}
    with pytest.raises(ConfigError, match="toy_pull must be >= 0"):
        load_recipe(None, base | {"toy_pull": -1})
    with pytest.raises(ConfigError, match="the same key"):
        load_recipe(None, base | {"toy_pull": 1, "toy_weight": 1})
    assert load_recipe(None, base).toy_pull is None
    unregister_lever("toy")
    with pytest.raises(ConfigError, match="unknown config key 'toy_pull'"):
        load_recipe(None, base | {"toy_pull": 1})


def test_a_lever_may_not_take_a_config_key_or_another_levers_and_a_task_not_a_built_in_name():
    class Seeded(ToyLever):
        name, keys, renamed = "seeded", {"seed": (int, 0)}, {}

    class Again(ToyLever):
        name, keys, renamed = "again", {"distill_weight": (float, 0.0)}, {}

    for cls, message in ((Seeded, "'seed' is a config key of its own"), (Again, "belongs to lever distillation")):
        with pytest.raises(ValueError, match=message):
            register_lever(cls)
    for name in ("stsb", "all", "sts", "pairs"):
        with pytest.raises(ValueError, match="not a built-in task's"):
            register_task(name, lambda n, a: ToyEvaluator(), ToyEvaluator)


def test_a_recorded_config_reads_with_todays_names_and_defaults(toy_lever):
    from mixcse.training.rundir import recorded_config

    old = {"model": "m", "toy_weight": 0.5}  # written before toy_pull had its name, and before the augment keys
    got = recorded_config(old)
    assert got["toy_pull"] == 0.5 and "toy_weight" not in got and got["augment_views"] == "one"
