"""sentence-transformers integration: MixCSELoss, LayerAveragePooling, and model directories in both directions."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer  # noqa: E402
from sentence_transformers.base.modules import Dense, Transformer  # noqa: E402
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss  # noqa: E402
from sentence_transformers.sentence_transformer.modules import Pooling  # noqa: E402

from mixcse.models.formats import read_model_dir  # noqa: E402
from mixcse.integrations import LayerAveragePooling, MixCSELoss  # noqa: E402
from mixcse.losses import PRESETS, contrastive_loss  # noqa: E402
from mixcse.models.encoder import load_encoder  # noqa: E402
from mixcse.models.sentence_encoder import SentenceEncoder  # noqa: E402

SENTENCES = ["t0w1 t0w2 the t1w3", "a t3w4 t3w5 t3w6 t3w7 of t5w1 t5w2 t5w3 t5w4 t5w5", "t7w7", "",
             "T2W2 and t2w3 t4w4 t4w5 in", "t6w0 t6w1 t6w2 t6w3 t6w4 t6w5 t6w6 t6w7 t6w8 t6w9 t6w10 t6w11 t0w0"]
TEST_POOLERS = ["cls_before_pooler", "avg", "avg_first_last", "avg_top2", "cls"]


def st_model(tiny_bert, pooling_mode="cls") -> SentenceTransformer:
    transformer = Transformer(str(tiny_bert), max_seq_length=32)
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling_mode)
    return SentenceTransformer(modules=[transformer, pooling], device="cpu")


@pytest.fixture(scope="module")
def mixcse_dirs(tiny_bert, tmp_path_factory):
    """One directory written by ``Encoder.save`` per test-time pooler; ``cls`` stores its MLP head."""
    root = tmp_path_factory.mktemp("mixcse-dirs")
    dirs = {}
    for pooler in TEST_POOLERS:
        encoder, tokenizer, _ = load_encoder(str(tiny_bert), pooler=pooler, mlp_only_train=pooler != "cls")
        if encoder.head is not None:
            torch.nn.init.normal_(encoder.head.dense.weight, std=0.2)  # not the identity-ish default
        assert encoder.test_pooler == pooler
        encoder.save(root / pooler, tokenizer)
        dirs[pooler] = root / pooler
    return dirs


# ------------------------------------------------------------------------------------------------ the loss
@pytest.mark.parametrize("preset", list(PRESETS))
def test_loss_parts_sum_to_mixcse_loss_value_and_gradient(preset):
    torch.manual_seed(0)
    z1, z2 = torch.randn(12, 16, dtype=torch.float64), torch.randn(12, 16, dtype=torch.float64)
    loss_fn = MixCSELoss.from_preset(None, preset)
    assert loss_fn.objective == PRESETS[preset]

    a1, a2 = z1.clone().requires_grad_(), z2.clone().requires_grad_()
    parts = loss_fn.compute_loss_from_embeddings(a1, a2)
    assert set(parts) == {"simcse", "mixing"}
    total = torch.stack(list(parts.values())).sum()  # what SentenceTransformerTrainer does with a dict
    total.backward()

    b1, b2 = z1.clone().requires_grad_(), z2.clone().requires_grad_()
    ref = contrastive_loss(b1, b2, PRESETS[preset])
    ref.loss.backward()
    torch.testing.assert_close(total, ref.loss, rtol=0, atol=1e-12)
    torch.testing.assert_close(parts["simcse"], ref.simcse_loss, rtol=0, atol=1e-12)
    torch.testing.assert_close(a1.grad, b1.grad, rtol=0, atol=1e-12)
    torch.testing.assert_close(a2.grad, b2.grad, rtol=0, atol=1e-12)
    assert set(loss_fn.last_stats) >= {"pos_cos", "neg_cos"}
    if PRESETS[preset].mixes:
        assert parts["mixing"].item() > 0  # the mixed negatives only add to the denominator


def test_constructor_matches_presets_and_validates():
    assert MixCSELoss(None).objective == PRESETS["mixcse"]
    assert MixCSELoss(None, directions=1).objective == PRESETS["mixcse-single"]
    assert MixCSELoss(None, lam=None, directions=1).objective == PRESETS["simcse"]
    assert MixCSELoss.from_preset(None, "mixcse", lam=0.1).lam == 0.1
    assert MixCSELoss(None).get_config_dict()["lam"] == 0.2 and "Zhang" in MixCSELoss(None).citation
    with pytest.raises(ValueError):
        MixCSELoss(None, lam=1.5)
    with pytest.raises(ValueError):
        MixCSELoss(None, mix_grad="sideways")
    with pytest.raises(ValueError):
        MixCSELoss.from_preset(None, "nope")


def test_simcse_settings_equal_multiple_negatives_ranking_loss(tiny_bert):
    """The docstring's Relations: no mixing = MNRL (1 direction) / symmetric per-direction MNRL (2 directions)."""
    torch.manual_seed(1)
    z1, z2 = torch.randn(10, 8), torch.randn(10, 8)
    model = st_model(tiny_bert)
    single = MixCSELoss(model, lam=None, directions=1).compute_loss_from_embeddings(z1, z2)
    mnrl = MultipleNegativesRankingLoss(model, scale=20.0).compute_loss_from_embeddings([z1, z2], None)
    torch.testing.assert_close(sum(single.values()), mnrl, rtol=1e-5, atol=1e-6)
    both = MixCSELoss(model, lam=None, directions=2).compute_loss_from_embeddings(z1, z2)
    symmetric = MultipleNegativesRankingLoss(model, scale=20.0, directions=("query_to_doc", "doc_to_query"),
                                             partition_mode="per_direction")
    torch.testing.assert_close(sum(both.values()), symmetric.compute_loss_from_embeddings([z1, z2], None),
                               rtol=1e-5, atol=1e-6)


def test_forward_embeds_both_columns_and_equals_mixcse_losses(tiny_bert):
    model = st_model(tiny_bert).eval()  # no dropout: the two columns give the same embeddings as encode()
    loss_fn = MixCSELoss(model)
    features = [model.preprocess(SENTENCES), model.preprocess(SENTENCES)]
    parts = loss_fn(features, None)
    emb = model.encode(SENTENCES, convert_to_tensor=True)
    ref = contrastive_loss(emb, emb, PRESETS["mixcse"])
    torch.testing.assert_close(sum(parts.values()), ref.loss, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="2 text columns"):
        loss_fn(features[:1], None)


def test_sentence_transformer_trainer_trains_with_mixcse_loss(tiny_bert, tmp_path):
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    torch.manual_seed(0)
    model = st_model(tiny_bert)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    sentences = [f"t{i % 8}w{i % 12} the t{(i + 3) % 8}w{(i * 7) % 12} t{i % 8}w{(i * 5) % 12}" for i in range(48)]
    train = Dataset.from_dict({"anchor": sentences, "positive": sentences})
    loss = MixCSELoss.from_preset(model, "mixcse")
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "run"), per_device_train_batch_size=16, learning_rate=1e-3, max_steps=3,
        logging_steps=1, report_to="none", save_strategy="no", seed=0, use_cpu=True, disable_tqdm=True,
        dataloader_num_workers=0)
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=train, loss=loss)
    trainer.train()

    logs = [entry for entry in trainer.state.log_history if "simcse" in entry]
    assert len(logs) == 3
    for entry in logs:  # the logged parts add up to the logged total (rounded to 4 places by the trainer)
        assert entry["simcse"] + entry["mixing"] == pytest.approx(entry["loss"], abs=2e-3)
        assert entry["mixing"] > 0
    after = model.state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert any("encoder.layer" in k for k in changed), "no encoder weight changed"
    assert set(loss.last_stats) == {"pos_cos", "neg_cos", "mix_cos"}

    # What ST saves, mixcse reads: same embeddings from both libraries.
    model.save(str(tmp_path / "st-trained"))
    ours = SentenceEncoder.load(tmp_path / "st-trained")
    assert ours.pooler == "cls_before_pooler"
    np.testing.assert_allclose(ours.encode(SENTENCES), model.encode(SENTENCES), atol=1e-5)


# ------------------------------------------------------------------------------------- mixcse dir -> ST / HF
@pytest.mark.parametrize("pooler", TEST_POOLERS)
def test_mixcse_dir_loads_in_sentence_transformers_with_same_embeddings(mixcse_dirs, pooler):
    path = mixcse_dirs[pooler]
    layer = pooler.startswith("avg_")
    model = SentenceTransformer(str(path), device="cpu", trust_remote_code=layer)
    kinds = [type(m).__name__ for m in model]
    assert kinds[0] == "Transformer"
    assert kinds[1] == ("LayerAveragePooling" if layer else "Pooling")
    assert ("Dense" in kinds) == (pooler == "cls")
    theirs = model.encode(SENTENCES, batch_size=4)
    ours = SentenceEncoder.load(path).encode(SENTENCES, batch_size=3)
    assert ours.shape == theirs.shape == (len(SENTENCES), 64)
    np.testing.assert_allclose(theirs, ours, atol=1e-5, rtol=0)
    assert read_model_dir(path).pooler == pooler


def test_layer_pooler_needs_trust_remote_code_in_st6(mixcse_dirs):
    """sentence-transformers 6 imports modules from outside its package only with trust_remote_code=True."""
    with pytest.raises(ValueError, match="trust_remote_code"):
        SentenceTransformer(str(mixcse_dirs["avg_first_last"]), device="cpu")


@pytest.mark.parametrize("pooler", ["cls_before_pooler", "avg_first_last"])
def test_mixcse_dir_loads_with_automodel(mixcse_dirs, pooler):
    from transformers import AutoModel, AutoTokenizer

    path = str(mixcse_dirs[pooler])
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()
    batch = tokenizer(SENTENCES[:3], padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    if pooler == "cls_before_pooler":
        emb = out.last_hidden_state[:, 0]
    else:
        mask = batch["attention_mask"].unsqueeze(-1).float()
        emb = ((out.hidden_states[1] + out.hidden_states[-1]) / 2 * mask).sum(1) / mask.sum(1)
    np.testing.assert_allclose(emb.numpy(), SentenceEncoder.load(path).encode(SENTENCES[:3]), atol=1e-5)


def test_sentence_transformers_resave_of_layer_pooler_round_trips(mixcse_dirs, tmp_path):
    model = SentenceTransformer(str(mixcse_dirs["avg_top2"]), device="cpu", trust_remote_code=True)
    model.save(str(tmp_path / "resaved"))
    modules = json.loads((tmp_path / "resaved/modules.json").read_text())
    assert modules[1]["type"] == "mixcse.integrations.st_modules.LayerAveragePooling"
    pooling_cfg = json.loads((tmp_path / "resaved" / modules[1]["path"] / "config.json").read_text())
    assert pooling_cfg == {"embedding_dimension": 64, "layers": [-2, -1]}
    ours = SentenceEncoder.load(tmp_path / "resaved")
    assert ours.pooler == "avg_top2"
    again = SentenceTransformer(str(tmp_path / "resaved"), device="cpu", trust_remote_code=True)
    np.testing.assert_allclose(again.encode(SENTENCES), ours.encode(SENTENCES), atol=1e-5)


def test_layer_average_pooling_built_by_hand_and_on_flattened_batches(tiny_bert, mixcse_dirs):
    transformer = Transformer(str(tiny_bert))
    assert not transformer.auto_model.config.output_hidden_states
    model = SentenceTransformer(modules=[transformer, LayerAveragePooling(64, [1, -1])], device="cpu")
    assert transformer.auto_model.config.output_hidden_states  # switched on by on_model_ready
    ours = SentenceEncoder.load(mixcse_dirs["avg_first_last"]).encode(SENTENCES)
    np.testing.assert_allclose(model.encode(SENTENCES), ours, atol=1e-5)

    # The flash-attention layout, (1, total_tokens, d) plus cu_seq_lens_q, pools like the padded one.
    torch.manual_seed(0)
    lengths = torch.tensor([3, 5, 1])
    padded = [torch.randn(3, 5, 4) for _ in range(3)]
    mask = (torch.arange(5)[None] < lengths[:, None]).long()
    pool = LayerAveragePooling(4, [0, 2])
    want = pool({"all_layer_embeddings": padded, "attention_mask": mask})["sentence_embedding"]
    flat = [torch.cat([h[i, :n] for i, n in enumerate(lengths)])[None] for h in padded]
    cu = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    got = pool({"all_layer_embeddings": flat, "cu_seq_lens_q": cu})["sentence_embedding"]
    torch.testing.assert_close(got, want)
    with pytest.raises(ValueError, match="output_hidden_states"):
        pool({"token_embeddings": padded[0], "attention_mask": mask})


# ------------------------------------------------------------------------------------------ ST dir -> mixcse
def test_sentence_transformers_dirs_load_in_mixcse(tiny_bert, tmp_path):
    from mixcse.errors import MixCSEError

    transformer = Transformer(str(tiny_bert), max_seq_length=24)
    cls = Pooling(64, pooling_mode="cls")
    head = Dense(64, 64, activation_function=torch.nn.Tanh())
    torch.nn.init.normal_(head.linear.weight, std=0.2)
    with_head = SentenceTransformer(modules=[transformer, cls, head], device="cpu")
    with_head.save(str(tmp_path / "cls-head"))
    ours = SentenceEncoder.load(tmp_path / "cls-head")
    assert ours.pooler == "cls" and ours.max_seq_length == 24  # ST 6 keeps it in the tokenizer config
    long = SENTENCES + [" ".join(f"t{i % 8}w{i % 12}" for i in range(40))]  # truncated alike by both
    np.testing.assert_allclose(ours.encode(long), with_head.encode(long), atol=1e-5)

    projection = SentenceTransformer(modules=[transformer, Pooling(64, pooling_mode="mean"), Dense(64, 32)],
                                     device="cpu")
    projection.save(str(tmp_path / "mean-dense"))
    with pytest.raises(MixCSEError, match="unsupported Dense"):
        load_encoder(str(tmp_path / "mean-dense"))


def test_sentence_transformers_dir_is_a_starting_point_for_training(tiny_bert, synthetic_data, tmp_path):
    import mixcse

    transformer = Transformer(str(tiny_bert), max_seq_length=24)
    model = SentenceTransformer(modules=[transformer, Pooling(64, pooling_mode="mean")], device="cpu")
    st_dir = tmp_path / "st-mean"
    model.save(str(st_dir))
    ours = SentenceEncoder.load(st_dir)
    assert ours.pooler == "avg"
    np.testing.assert_allclose(ours.encode(SENTENCES), model.encode(SENTENCES), atol=1e-5)

    # Training takes its pooler from the config (TrainConfig.pooler, default cls), not from the directory: naming
    # the directory's own pooling (mean -> avg) continues the model as it was built.
    result = mixcse.train(dict(model=str(st_dir), train_file=str(synthetic_data["corpus"]),
                               output_dir=str(tmp_path / "run"), pooler="avg", max_steps=3, batch_size=8,
                               select_on="none", max_seq_length=24),
                          progress=False)
    assert result.steps == 3
    best = tmp_path / "run" / "best"
    trained = SentenceEncoder.load(best)
    assert trained.pooler == "avg"
    assert not np.allclose(trained.encode(SENTENCES), ours.encode(SENTENCES), atol=1e-6)
    np.testing.assert_allclose(SentenceTransformer(str(best), device="cpu").encode(SENTENCES),
                               trained.encode(SENTENCES), atol=1e-5)
    assert (best / "README.md").exists()  # the trainer's model card hook
