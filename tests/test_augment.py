"""``positives: augment``: the text operators, views that a seed fixes whatever the process split, a resumed run
equal to an uninterrupted one, every loss preset, cutoff and dropout off (mixcse/training/levers/augment.py)."""

import json
from collections import Counter

import numpy as np
import pytest
import torch
from test_train import tiny_config

import mixcse
from mixcse.losses import PRESETS
from mixcse.training import step
from mixcse.training.config import load_recipe
from mixcse.training.levers.augment import (
    DEFAULT,
    OPERATORS,
    Augment,
    augment_text,
    cutoff,
    delete_span,
    drop_length,
    drop_token,
    shuffle_span,
    strip_symbols,
)

WORDS = "apple iphone 12 pro 128gb graphite (unlocked) - refurbished".split()


def rng(seed=0):
    return np.random.default_rng(seed)


def test_each_operator_does_what_its_name_says():
    for seed in range(50):
        out = delete_span(WORDS, rng(seed))
        gone = len(WORDS) - len(out)
        assert gone in (1, 2) and any(WORDS[:i] + WORDS[i + gone:] == out for i in range(len(WORDS)))
        out = shuffle_span(WORDS, rng(seed))
        moved = [i for i, (a, b) in enumerate(zip(WORDS, out)) if a != b]
        assert sorted(out) == sorted(WORDS) and (not moved or moved[-1] - moved[0] < 4)
        out = drop_token(WORDS, rng(seed))
        assert all(w in WORDS for w in out) and out == [w for w in WORDS if w in out]
        out = drop_length(WORDS, rng(seed))
        lengths = {len(w) for w in WORDS} - {len(w) for w in out}
        assert len(lengths) == 1 and out == [w for w in WORDS if len(w) not in lengths]
        out = strip_symbols(WORDS, rng(seed))
        kept = WORDS if len(out) == len(WORDS) else [w for w in WORDS if w != "-"]  # "-" stripped is gone
        assert all(o in (w, "".join(c for c in w if c.isalnum())) for o, w in zip(out, kept))
    dropped = [1 - len(drop_token(WORDS, rng(s))) / len(WORDS) for s in range(2000)]
    assert abs(np.mean(dropped) - 0.2) < 0.01
    outs = [strip_symbols(WORDS, rng(s)) for s in range(2000)]
    assert abs(np.mean(["unlocked" in out for out in outs]) - 0.2) < 0.025  # each token stripped with p = 0.2
    assert abs(np.mean(["-" not in out for out in outs]) - 0.2) < 0.025


def test_one_operator_per_text_with_the_given_probabilities_and_never_an_empty_text():
    text = " ".join(WORDS)
    draws = Counter(augment_text(text, DEFAULT, rng(s))[1] for s in range(4000))
    for name, p in DEFAULT.items():
        assert abs(draws[name] / 4000 - p) < 0.03, (name, draws)
    assert abs(draws[None] / 4000 - (1 - sum(DEFAULT.values()))) < 0.03
    assert augment_text(text, {}, rng()) == (text, None)
    assert augment_text("one", {"delete_span": 1.0}, rng()) == ("one", "delete_span")  # never emptied
    assert augment_text(text, DEFAULT, rng(7)) == augment_text(text, DEFAULT, rng(7))


def lever(tiny_bert, synthetic_data, tmp_path, **keys):
    from mixcse.models.encoder import load_encoder

    cfg = load_recipe(None, tiny_config(tiny_bert, synthetic_data, tmp_path / "o", positives="augment", **keys))
    encoder, tokenizer, _ = load_encoder(str(tiny_bert), pooler="cls")
    texts = [line.strip() for line in synthetic_data["corpus"].read_text().splitlines() if line.strip()]

    class Start:
        anchors = texts

    start = Start()
    start.tokenizer, start.encoder, start.note = tokenizer, encoder, lambda line: None
    augment = Augment(cfg)
    augment.prepare(start)
    return augment


def plain(batch):  # every row's token ids without padding
    return [ids[mask.bool()].tolist()
            for ids, mask in zip(batch["positive_input_ids"], batch["positive_attention_mask"])]


def test_views_are_fixed_by_seed_step_and_text_whatever_the_split_of_the_batch(tiny_bert, synthetic_data, tmp_path):
    augment = lever(tiny_bert, synthetic_data, tmp_path)
    indices = np.arange(40, 56)
    whole = augment.view({}, indices, step=3)
    halves = [augment.view({}, part, step=3) for part in (indices[:8], indices[8:])]  # two processes' shares
    assert plain(whole) == plain(halves[0]) + plain(halves[1])
    assert plain(whole) == plain(augment.view({}, indices, step=3))
    assert plain(whole) != plain(augment.view({}, indices, step=4))  # a new draw every step
    other = lever(tiny_bert, synthetic_data, tmp_path, seed=6)
    assert plain(whole) != plain(other.view({}, indices, step=3))
    both = lever(tiny_bert, synthetic_data, tmp_path, augment_views="both").view({}, indices, step=3)
    assert plain(both) == plain(whole)  # view 2 draws the same; view 1 draws its own
    assert both["input_ids"].tolist() != both["positive_input_ids"].tolist()


def test_cutoff_takes_positions_out_of_the_attention_but_never_the_special_tokens():
    batch = {"input_ids": torch.arange(40).reshape(2, 20), "attention_mask": torch.ones(2, 20, dtype=torch.long)}
    batch["attention_mask"][1, 10:] = 0
    out = cutoff(batch, 0.2, seed=0, step=0, indices=np.asarray([5, 9]), view=2)
    mask = out["attention_mask"]
    assert (20 - mask[0].sum()).item() == round(0.2 * 18) and (10 - mask[1].sum()).item() == round(0.2 * 8)
    assert mask[:, 0].all() and mask[0, 19] == 1 and mask[1, 9] == 1 and not mask[1, 10:].any()
    assert torch.equal(out["input_ids"], batch["input_ids"])


def test_dropout_off_stops_the_transformers_dropout_and_keeps_the_head_in_training(tiny_bert, synthetic_data,
                                                                                   tmp_path):
    augment = lever(tiny_bert, synthetic_data, tmp_path, augment_dropout=False)
    augment.encoder.train()
    batch = augment.view({}, np.arange(8), step=0)
    assert augment.encoder.training and not augment.encoder.backbone.training
    views = {k[len("positive_"):]: v for k, v in batch.items() if k.startswith("positive_")}
    once, twice = augment.encoder(views), augment.encoder(views)
    assert torch.equal(once, twice)  # no dropout: the same text gives the same vector
    once.sum().backward()
    assert augment.encoder.head is not None and augment.encoder.head.dense.weight.grad is not None


def test_a_mask_with_gaps_keeps_its_tail_in_length_buckets(tiny_bert):
    from mixcse.models.encoder import load_encoder

    encoder, tokenizer, _ = load_encoder(str(tiny_bert), pooler="avg")
    encoder.eval()
    batch = dict(tokenizer(["t0w1 t0w2 t1w3 t2w2 t3w3 the", "t5w5 a", "t2w0 of t3w3 t4w4", "t6w6"], padding=True,
                           return_tensors="pt", return_token_type_ids=False))
    cut = cutoff(batch, 0.5, seed=0, step=0, indices=np.arange(4), view=2)
    with torch.no_grad():
        assert torch.allclose(encoder(cut, length_buckets=1), encoder(cut, length_buckets=2), atol=1e-5)


@pytest.mark.parametrize("loss", list(PRESETS))
def test_every_loss_preset_trains_with_augmented_views(loss, tiny_bert, synthetic_data, tmp_path):
    out = tmp_path / loss
    result = mixcse.train(tiny_config(tiny_bert, synthetic_data, out, loss=loss, positives="augment", max_steps=2,
                                      eval_steps=2, augment_cutoff=0.1))
    assert result.steps == 2
    report = json.loads((out / "summary.json").read_text())["levers"]["augment"]
    assert report["operators"] == DEFAULT and report["views"] == "one" and report["cutoff"] == 0.1
    losses = [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()
              if "loss" in json.loads(line)]
    assert losses and all(np.isfinite(losses))


def test_a_run_with_augmented_views_resumes_bit_for_bit(tiny_bert, synthetic_data, tmp_path, interrupted_at_call):
    cfg = dict(max_steps=9, save_steps=3, eval_steps=4, positives="augment", augment_views="both")
    full = tmp_path / "full"
    mixcse.train(tiny_config(tiny_bert, synthetic_data, full, **cfg))
    killed = tmp_path / "killed"
    with interrupted_at_call(step, "training_loss", 8):  # dies inside step 8, after the checkpoint at step 6
        mixcse.train(tiny_config(tiny_bert, synthetic_data, killed, **cfg))
    mixcse.train(tiny_config(tiny_bert, synthetic_data, killed, **cfg), resume=True)
    a, b = (torch.load(p / "checkpoint/state.pt", weights_only=False)["model"] for p in (full, killed))
    assert all(torch.equal(a[name], b[name]) for name in a)


def test_the_operators_are_the_documented_five():
    assert list(OPERATORS) == list(DEFAULT) == ["delete_span", "shuffle_span", "drop_token", "drop_length",
                                                "strip_symbols"]
