"""The on-disk model format with plain transformers + safetensors + json: no sentence-transformers needed.

A directory ``Encoder.save`` writes must be a Hugging Face model whose sentence-transformers files say exactly how
to pool; these tests read those files by hand and recompute the embeddings from them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from mixcse.errors import MixCSEError
from mixcse.models.formats import LAYER_POOLERS, read_model_dir
from mixcse.models.encoder import load_encoder
from mixcse.models.sentence_encoder import SentenceEncoder
from mixcse.utils.files import read_json, read_json_or_none, to_jsonable

SENTENCES = ["t0w1 t0w2 the t1w3", "t5w5 a t6w6 t6w7 t5w1", "t2w2"]


def save(tiny_bert, directory, pooler):
    encoder, tokenizer, _ = load_encoder(str(tiny_bert), pooler=pooler, mlp_only_train=pooler != "cls")
    if encoder.head is not None:
        torch.nn.init.normal_(encoder.head.dense.weight, std=0.2)
    encoder.save(directory, tokenizer, max_seq_length=24)
    return encoder


def by_hand(directory) -> np.ndarray:
    """Embeddings computed from the directory's files alone, as a reader without mixcse would."""
    from transformers import AutoModel, AutoTokenizer

    modules = json.loads((directory / "modules.json").read_text())
    pooling = json.loads((directory / "1_Pooling/config.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = AutoModel.from_pretrained(directory).eval()
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    mask = batch["attention_mask"].unsqueeze(-1).float()
    if "layers" in pooling:
        first, last = pooling["layers"]
        tokens = (out.hidden_states[first] + out.hidden_states[last]) / 2
        emb = (tokens * mask).sum(1) / mask.sum(1)
    elif pooling["pooling_mode"] == "cls":
        emb = out.last_hidden_state[:, 0]
    else:
        emb = (out.last_hidden_state * mask).sum(1) / mask.sum(1)
    if any(m["path"] == "2_Dense" for m in modules):
        head = load_file(directory / "2_Dense/model.safetensors")
        emb = torch.tanh(emb @ head["linear.weight"].T + head["linear.bias"])
    return emb.numpy()


@pytest.mark.parametrize("pooler", ["cls", "cls_before_pooler", "avg", "avg_first_last"])
def test_saved_directory_is_described_by_its_files(tiny_bert, tmp_path, pooler):
    directory = tmp_path / pooler
    encoder = save(tiny_bert, directory, pooler)
    modules = json.loads((directory / "modules.json").read_text())
    kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
    pooling = "LayerAveragePooling" if pooler in LAYER_POOLERS else "Pooling"
    assert kinds == ["Transformer", pooling] + (["Dense"] if pooler == "cls" else [])
    assert json.loads((directory / "mixcse.json").read_text())["pooler"] == pooler
    assert json.loads((directory / "sentence_bert_config.json").read_text())["max_seq_length"] == 24
    if pooler in LAYER_POOLERS:
        assert json.loads((directory / "1_Pooling/config.json").read_text())["layers"] == list(LAYER_POOLERS[pooler])
    if pooler == "cls":
        head = load_file(directory / "2_Dense/model.safetensors")
        assert torch.equal(head["linear.weight"], encoder.head.dense.weight.detach())
    info = read_model_dir(directory)
    assert (info.pooler, info.max_seq_length) == (pooler, 24)
    np.testing.assert_allclose(by_hand(directory), SentenceEncoder.load(directory).encode(SENTENCES), atol=1e-5)


def test_older_sentence_transformers_layout_is_read(tiny_bert, tmp_path):
    """sentence-transformers < 6 stored one boolean per pooling mode and the length beside the modules."""
    import shutil

    directory = tmp_path / "st5"
    shutil.copytree(tiny_bert, directory)
    (directory / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 20}))
    (directory / "1_Pooling").mkdir()
    (directory / "1_Pooling/config.json").write_text(json.dumps({
        "word_embedding_dimension": 64, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True}))
    info = read_model_dir(directory)
    assert (info.pooler, info.max_seq_length) == ("avg", 20)


def test_unreadable_configuration_is_a_user_error_naming_the_file(tiny_bert, tmp_path):
    directory = tmp_path / "broken"
    save(tiny_bert, directory, "avg")
    (directory / "1_Pooling/config.json").write_text("{not json")
    with pytest.raises(MixCSEError, match=r"1_Pooling/config\.json"):
        read_model_dir(directory)


def test_json_readers_and_sanitiser(tmp_path):
    missing, broken = tmp_path / "missing.json", tmp_path / "broken.json"
    broken.write_text("[1,")
    assert read_json_or_none(missing) is None and read_json_or_none(broken) is None
    for path in (missing, broken):
        with pytest.raises(MixCSEError, match=path.name):
            read_json(path)
    value = to_jsonable({1: (np.float32(0.5), float("nan")), "t": torch.tensor(2), "p": tmp_path})
    assert value == {"1": [0.5, None], "t": 2, "p": str(tmp_path)}
    json.dumps(value, allow_nan=False)
