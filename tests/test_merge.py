"""``mixcse merge`` and ``mixcse.models.merge``: weighted averages of model folders, and WiSE-FT blends in memory.

The "adapted" model is the tiny BERT (with SimCSE's MLP head in its test-time pooler, so 2_Dense is merged too)
with every floating tensor moved by seeded noise and saved with ``Encoder.save``; nothing is trained.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from conftest import FILLER, TOPICS, make_tiny_bert
from mixcse.cli import main
from mixcse.errors import MixCSEError
from mixcse.models import merge as merge_mod
from mixcse.models.encoder import load_encoder
from mixcse.models.merge import blend, merge_models, merge_state_dicts
from mixcse.models.sentence_encoder import SentenceEncoder
from mixcse.utils.files import read_json

pytestmark = pytest.mark.numeric  # rerun on other arithmetic paths (docs/development.md)

SENTENCES = ["t0w1 t0w2 the t1w3", "a t3w4 t3w5 t3w6 t3w7 of t5w1", "t7w7", "t2w2 and t2w3 t4w4 t4w5 in"]
WEIGHT_FILES = ("model.safetensors", "2_Dense/model.safetensors")


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.reshape(-1).view(torch.uint8),
                                                                     b.reshape(-1).view(torch.uint8))


def weights_of(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a model folder's weight files, keyed 'file:tensor'."""
    return {f"{name}:{key}": value for name in WEIGHT_FILES if (folder / name).exists()
            for key, value in load_file(folder / name).items()}


def expected(folders: list[Path], weights: list[float]) -> dict[str, torch.Tensor]:
    """sum_k w_k * theta_k written out independently: float64 terms, summed in order, cast to float32."""
    states = [weights_of(f) for f in folders]
    return {key: sum(w * s[key].double() for w, s in zip(weights, states)).float() for key in states[0]}


@pytest.fixture(scope="module")
def models(tiny_bert, tmp_path_factory) -> dict[str, Path]:
    """start: the tiny BERT, [CLS] + MLP head, a model card; adapted: every tensor moved by seeded noise;
    deeper: 3 layers; other_vocab: the same sizes, other words; plain: the tiny BERT as transformers saved it."""
    root = tmp_path_factory.mktemp("merge-models")
    encoder, tokenizer, _ = load_encoder(str(tiny_bert), pooler="cls", mlp_only_train=False)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        torch.nn.init.normal_(encoder.head.dense.weight, std=0.2, generator=generator)
        encoder.backbone.embeddings.word_embeddings.weight[0, 0] = -0.0  # a negative zero the start must keep
    encoder.save(root / "start", tokenizer, max_seq_length=32)
    (root / "start" / "README.md").write_text("# start\n\nA model card.\n")
    with torch.no_grad():
        for tensor in encoder.state_dict().values():
            if tensor.is_floating_point():
                tensor.add_(0.01 * torch.randn(tensor.shape, generator=generator))
        encoder.backbone.embeddings.word_embeddings.weight[0, 0] = 0.5
    encoder.save(root / "adapted", tokenizer, max_seq_length=32)
    vocab = FILLER + [w for topic in TOPICS for w in topic]
    make_tiny_bert(root / "deeper", vocab=vocab, layers=3)
    make_tiny_bert(root / "other_vocab", vocab=[f"x{w}" for w in vocab])
    return {"start": root / "start", "adapted": root / "adapted", "deeper": root / "deeper",
            "other_vocab": root / "other_vocab", "plain": tiny_bert}


def snapshot(*roots: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for root in roots for p in Path(root).rglob("*")}


# ------------------------------------------------------------------------------------------------ in memory
def test_a_state_averaged_with_itself_is_itself_bit_for_bit():
    special = torch.tensor([-0.0, 0.0, 1e-45, -3.4e38, 3.4e38, 1 / 3, float("inf"), -float("inf"), float("nan")])
    state = {"f32": torch.cat([special, torch.randn(1000)]), "bf16": torch.randn(64).bfloat16(),
             "f16": torch.tensor([-0.0, 6e-8, 65504.0, 0.1]).half(), "ids": torch.arange(5),
             "mask": torch.tensor([True, False])}
    merged = merge_state_dicts([state, state], [0.5, 0.5])
    assert list(merged) == list(state)
    assert all(same_bits(merged[k], state[k]) for k in state)
    assert all(merged[k].data_ptr() != state[k].data_ptr() for k in state)  # copies, not views


def test_blend_gives_the_start_at_0_the_adapted_at_1_and_the_mean_at_one_half(models):
    start = load_encoder(str(models["start"]))[0].state_dict()
    adapted = load_encoder(str(models["adapted"]))[0].state_dict()
    assert "head.dense.weight" in start and start["backbone.embeddings.word_embeddings.weight"][0, 0].signbit()
    assert all(same_bits(blend(start, adapted, 0.0)[k], start[k]) for k in start)
    assert all(same_bits(blend(start, adapted, 1.0)[k], adapted[k]) for k in start)
    half = blend(start, adapted, 0.5)
    assert all(same_bits(half[k], ((start[k].double() + adapted[k].double()) / 2).float()) for k in start)
    beyond = blend(start, adapted, 1.5)  # extrapolation: the same line, past the adapted state
    for k in start:
        torch.testing.assert_close(beyond[k], (adapted[k].double() + 0.5 * (adapted[k].double() - start[k].double()))
                                   .float(), rtol=0, atol=1e-7)


def test_merge_state_dicts_refuses_other_keys_shapes_and_unequal_integer_buffers():
    a = {"w": torch.ones(2, 3), "n": torch.tensor([1, 2])}
    with pytest.raises(MixCSEError, match=r"^different weights: 'n' is in model 1 but not in model 2$"):
        merge_state_dicts([a, {"w": a["w"]}], [0.5, 0.5])
    with pytest.raises(MixCSEError, match=r"^different weights: 'x' is in model 2 but not in model 1$"):
        merge_state_dicts([a, {**a, "x": a["w"]}], [0.5, 0.5])
    with pytest.raises(MixCSEError, match=r"^different shapes for 'w': \(2, 3\) in model 1, \(3, 2\) in model 2$"):
        merge_state_dicts([a, {**a, "w": torch.ones(3, 2)}], [0.5, 0.5])
    with pytest.raises(MixCSEError, match=r"^'n' \(torch.int64, not averaged\) differs between model 1 and model 2$"):
        merge_state_dicts([a, {**a, "n": torch.tensor([1, 3])}], [0.5, 0.5])
    with pytest.raises(MixCSEError, match="weights must be finite numbers, got nan"):
        merge_state_dicts([a, a], [float("nan"), 1.0])


# ------------------------------------------------------------------------------------------------ folders
def test_a_folder_merged_with_itself_equals_it_bit_for_bit(models, tmp_path):
    for name in ("plain", "start"):
        report = merge_models([models[name], models[name]], output=tmp_path / name)
        assert report["weights"] == [0.5, 0.5]  # equal by default
        source = weights_of(models[name]) if name == "start" else \
            {f"model.safetensors:{k}": v for k, v in load_file(models[name] / "model.safetensors").items()}
        merged = weights_of(tmp_path / name)
        assert list(merged) == list(source) and all(same_bits(merged[k], source[k]) for k in source)


def test_folder_blends_at_0_1_and_one_half_and_equal_default_weights(models, tmp_path):
    pair = [models["start"], models["adapted"]]
    merge_models(pair, [1.0, 0.0], output=tmp_path / "a0")
    merge_models(pair, [0.0, 1.0], output=tmp_path / "a1")
    merge_models(pair, output=tmp_path / "default")
    for out, folder in (("a0", models["start"]), ("a1", models["adapted"])):
        got, want = weights_of(tmp_path / out), weights_of(folder)
        assert len(got) == len(want) > 0 and all(same_bits(got[k], want[k]) for k in want)
    got, want = weights_of(tmp_path / "default"), expected(pair, [0.5, 0.5])
    assert "2_Dense/model.safetensors:linear.weight" in got and all(same_bits(got[k], want[k]) for k in want)
    three = [models["start"], models["adapted"], models["start"]]
    report = merge_models(three, output=tmp_path / "three")
    assert report["weights"] == [1 / 3] * 3
    got, want = weights_of(tmp_path / "three"), expected(three, [1 / 3] * 3)
    assert all(same_bits(got[k], want[k]) for k in want)


def test_cli_round_trip_encodes_and_sentence_transformers_loads_it(models, tmp_path, capsys):
    from sentence_transformers import SentenceTransformer

    out = tmp_path / "new" / "merged"
    rc = main(["merge", str(models["start"]), str(models["adapted"]), "--weights", "0.25", "0.75",
               "--output", str(out)])
    assert rc == 0
    assert capsys.readouterr().out == (f"wrote {out}: 0.25 x {models['start']} + 0.75 x {models['adapted']} "
                                       f"(41 tensors, pooler cls)\n")
    got, want = weights_of(out), expected([models["start"], models["adapted"]], [0.25, 0.75])
    assert all(same_bits(got[k], want[k]) for k in want)
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == \
        sorted(p.relative_to(models["start"]) for p in models["start"].rglob("*"))
    assert read_json(out / "mixcse.json") == {"pooler": "cls", "merge": {
        "inputs": [str(models["start"]), str(models["adapted"])], "weights": [0.25, 0.75]}}
    card = (out / "README.md").read_text()
    assert card.startswith("# start\n\nA model card.\n\n## Merged from\n")
    assert f"| `{models['adapted']}` | 0.75 |" in card
    ours = SentenceEncoder.load(out, device="cpu").encode(SENTENCES)
    theirs = SentenceTransformer(str(out), device="cpu").encode(SENTENCES)
    start = SentenceEncoder.load(models["start"], device="cpu").encode(SENTENCES)
    assert ours.shape == (len(SENTENCES), 64) and np.abs(ours - theirs).max() < 1e-5
    assert np.abs(ours - start).max() > 1e-3  # the merged weights are the ones in use


def test_allow_extrapolation_accepts_negative_weights_summing_to_1(models, tmp_path, capsys):
    out = tmp_path / "beyond"
    pair = [models["start"], models["adapted"]]
    argv = ["merge", *map(str, pair), "--weights", "-0.5", "1.5", "--output", str(out)]
    assert main(argv) == 2 and not out.exists()
    assert main(argv + ["--allow-extrapolation"]) == 0
    got, want = weights_of(out), expected(pair, [-0.5, 1.5])
    assert all(same_bits(got[k], want[k]) for k in want)
    assert main(["merge", *map(str, pair), "--weights", "-0.5", "1.0", "--allow-extrapolation",
                 "--output", str(tmp_path / "scaled")]) == 2
    assert "--weights sum to 0.5, not 1" in capsys.readouterr().err


def test_a_read_only_input_gives_a_writable_output(models, tmp_path):
    source = tmp_path / "read-only"
    shutil.copytree(models["start"], source)
    for path in [*source.rglob("*"), source]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        merge_models([source, models["adapted"]], output=tmp_path / "out")
    finally:
        for path in [source, *source.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
    assert all(os.access(p, os.W_OK) for p in (tmp_path / "out").rglob("*"))


def test_a_failure_while_writing_leaves_nothing_behind(models, tmp_path, monkeypatch):
    def fails(*args):
        raise OSError("disk full")

    monkeypatch.setattr(merge_mod, "_record_merge", fails)
    with pytest.raises(OSError, match="disk full"):
        merge_models([models["start"], models["adapted"]], output=tmp_path / "new" / "deeper" / "out")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------ refusals
REFUSALS = [  # (models, extra arguments, the error line); {name} is a model of the fixture, {out} the output
    (["start", "deeper"], [], "error: different architectures: {deeper} has num_hidden_layers 3, {start} "
                              "num_hidden_layers 2"),
    (["plain", "other_vocab"], [], "error: different tokenizers: {other_vocab} and {plain} differ in their "
                                   "vocabulary"),
    (["start", "plain"], [], "error: different poolers: {plain} pools with cls_before_pooler, {start} with cls"),
    (["start", "adapted"], ["--weights", "-0.5", "1.5"],
     "error: weight -0.5 is negative; an average takes weights >= 0 (pass --allow-extrapolation to extrapolate "
     "beyond the models)"),
    (["start", "adapted"], ["--weights", "0.5", "0.6"], "error: --weights sum to 1.1, not 1; merging takes weights "
                                                        "that sum to 1"),
    (["start", "adapted"], ["--weights", "1"], "error: --weights has 1 value for 2 models; give one weight per "
                                               "model"),
    (["start", "adapted"], ["--weights", "nan", "1"], "error: --weights must be finite numbers, got nan"),
    (["start"], [], "error: merge needs at least two models, got 1"),
    (["start", "adapted"], ["--output", "{start}"], "error: output {start} exists; choose a new folder"),
    (["start", "not_a_model"], [], "error: {not_a_model} is not a model folder: no config.json; no tokenizer "
                                   "files (tokenizer.json, tokenizer_config.json or vocab.txt); no *.safetensors "
                                   "weights"),
    (["start", "missing"], [], "error: model path does not exist: {missing}"),
]


@pytest.mark.parametrize("names, extra, line", REFUSALS, ids=[r[2][7:40] for r in REFUSALS])
def test_refusals_are_one_error_line_and_write_nothing(names, extra, line, models, tmp_path, capsys):
    paths = {**{k: str(v) for k, v in models.items()}, "not_a_model": str(tmp_path / "notes"),
             "missing": str(tmp_path / "missing")}
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "notes.txt").write_text("not a model\n")
    out = tmp_path / "out"
    extra = [arg.format(**paths) for arg in extra]
    argv = ["merge", *(paths[n] for n in names), *extra] + ([] if "--output" in extra else ["--output", str(out)])
    before = snapshot(tmp_path, *models.values())
    assert main(argv) == 2
    assert capsys.readouterr().err == line.format(**paths) + "\n"
    assert snapshot(tmp_path, *models.values()) == before


def test_merge_select_data_searches_the_blend_a_guard_allows(models, synthetic_data, tmp_path, monkeypatch, capsys):
    """The guard falls linearly in a (tests/test_adaptation.py): the adapted model is refused, the search finds the
    weight at the boundary, and the output is bit for bit `mixcse merge --weights 1-a a`."""
    from test_adaptation import DEV, guard_falling_in_alpha, write_pairs

    dev = write_pairs(tmp_path / "dev.tsv", DEV)
    guard_falling_in_alpha(monkeypatch)
    out = tmp_path / "searched"
    assert main(["merge", str(models["start"]), str(models["adapted"]), "--select-data", str(dev), "--guard-data",
                 "stsb_dev", "--guard-tolerance", "6.2", "--data-dir", str(synthetic_data["data_dir"]),
                 "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "candidates scored (the frontier):" in printed
    assert ("decision: the adapted model scored 55.00 but stsb_dev fell to 70.00, more than 6.2 below 80.00; the "
            "blend a 0.59 keeps") in printed
    alpha = 0.59375  # bisection of (0, 1) for the boundary at 0.62: 0.5, 0.75, 0.625, 0.5625, 0.59375
    assert f"wrote {out}: {1 - alpha:g} x {models['start']} + {alpha:g} x {models['adapted']}" in printed
    monkeypatch.undo()
    by_weights = tmp_path / "by-weights"
    assert main(["merge", str(models["start"]), str(models["adapted"]), "--weights", repr(1 - alpha), repr(alpha),
                 "--output", str(by_weights)]) == 0
    a, b = weights_of(out), weights_of(by_weights)
    assert a.keys() == b.keys() and all(same_bits(a[k], b[k]) for k in a)


def test_merge_select_data_without_a_guard_keeps_the_better_end(models, tmp_path, monkeypatch, capsys):
    from test_adaptation import DEV, guard_falling_in_alpha, write_pairs

    dev = write_pairs(tmp_path / "dev.tsv", DEV)
    guard_falling_in_alpha(monkeypatch)  # no guard asked: the adapted model (55) beats the start (50)
    out = tmp_path / "adapted-kept"
    assert main(["merge", str(models["start"]), str(models["adapted"]), "--select-data", str(dev),
                 "--output", str(out)]) == 0
    assert "decision: " + str(out) + " is the adapted model: the best pairs_ap 55.00" in capsys.readouterr().out
    a, b = weights_of(out), weights_of(models["adapted"])
    assert all(same_bits(a[k], b[k]) for k in b)
