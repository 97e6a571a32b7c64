"""The one inference path (mixcse/models/inference.py, pooling.py) and the one file hash (utils.files.file_digest).

Poolers: torch tensors and numpy arrays through the same code, each equal bit for bit to the formula it replaced.
The encode loop: both encoders' embeddings equal, bit for bit, the batches computed by hand (length-sorted, padded
to each batch's longest, rows put back), so the loop itself cannot drift. ``open_encoder``: the one dispatch,
encoders passed through, importable without torch. Hashes: fingerprints, graph digests, cache keys and checksums
equal the values the earlier per-module hash code gave.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from mixcse.errors import MixCSEError
from mixcse.models import pooling
from mixcse.models.inference import BACKENDS, EncoderBase, open_encoder
from mixcse.models.sentence_encoder import SentenceEncoder, _fingerprint
from mixcse.utils.files import file_digest

pytestmark = pytest.mark.numeric  # rerun on other arithmetic paths (docs/development.md)

SENTENCES = ["t0w1 t0w2 the t1w3", "a t3w4 t3w5 t3w6 t3w7 of t5w1 t5w2 t5w3 t5w4 t5w5", "t7w7",
             "t2w2 and t2w3 t4w4 t4w5 in", "t6w0 t6w1 t6w2 t6w3 t6w4 t6w5 t6w6 t6w7 t6w8 t6w9 t6w10 t0w0",
             "of t1w1", "t5w5 t5w6 t5w7 the t6w6 t6w7 t6w8 t6w9"]


# --------------------------------------------------------------------------------------------------- poolers
def _hidden(seed: int = 0):
    rng = np.random.default_rng(seed)
    hidden = rng.normal(size=(4, 6, 8)).astype(np.float32)
    mask = np.array([[1] * 6, [1] * 3 + [0] * 3, [1] + [0] * 5, [0] * 6], dtype=np.int64)  # a row with none
    return hidden, mask


def test_every_pooler_is_one_code_for_torch_and_numpy_and_equals_the_formula_it_replaced():
    hidden, mask = _hidden()
    layers = [hidden + i for i in range(4)]
    m = mask[..., None].astype(np.float32)
    old_numpy_mean = (hidden * m).sum(1) / np.clip(m.sum(1), 1.0, None)  # onnx_backend's formula
    th, tm = torch.from_numpy(hidden), torch.from_numpy(mask)
    tmf = tm.unsqueeze(-1).to(th.dtype)
    old_torch_mean = (th * tmf).sum(1) / tmf.sum(1).clamp_min(1.0)  # encoder.masked_mean's formula
    assert np.array_equal(pooling.pool("avg", hidden, mask), old_numpy_mean)
    assert torch.equal(pooling.pool("avg", th, tm), old_torch_mean)
    assert np.array_equal(pooling.pool("avg", hidden, mask)[3], np.zeros(8, np.float32))
    for name in ("cls", "cls_before_pooler"):
        assert np.array_equal(pooling.pool(name, hidden, mask), hidden[:, 0])
        assert torch.equal(pooling.pool(name, th, tm), th[:, 0])
    for name, (i, j) in (("avg_first_last", (1, -1)), ("avg_top2", (-2, -1))):
        tl = [torch.from_numpy(x) for x in layers]
        want = (tl[i] + tl[j]) / 2.0
        want_mean = (want * tmf).sum(1) / tmf.sum(1).clamp_min(1.0)
        assert torch.equal(pooling.pool(name, tl, tm), want_mean)
        np.testing.assert_allclose(pooling.pool(name, layers, mask), want_mean.numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="unknown pooler"):
        pooling.pool("max", hidden, mask)


def test_layer_average_pooling_of_sentence_transformers_uses_the_same_pooler():
    from mixcse.integrations.st_modules import LayerAveragePooling

    hidden, mask = _hidden(1)
    layers = tuple(torch.from_numpy(hidden + i) for i in range(3))
    for dtype in (torch.float32, torch.bfloat16):
        cast = tuple(x.to(dtype) for x in layers)
        got = LayerAveragePooling(8, [1, -1])({"all_layer_embeddings": cast, "attention_mask": torch.from_numpy(mask)})
        want = pooling.two_layer_mean(cast[1].float(), cast[-1].float(), torch.from_numpy(mask)).to(dtype)
        assert got["sentence_embedding"].dtype == dtype and torch.equal(got["sentence_embedding"], want)


# ------------------------------------------------------------------------------------------- the encode loop
@pytest.fixture(scope="module")
def model_dir(tiny_avg_model):
    return tiny_avg_model


def _by_hand(tokenizer, sentences, batch_size, forward):
    """The loop written out: tokenise, sort by length (stable, longest first), pad each batch, rows back."""
    ids = tokenizer(sentences, truncation=True)["input_ids"]
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    out = [None] * len(ids)
    for start in range(0, len(ids), batch_size):
        idx = order[start:start + batch_size]
        for i, row in zip(idx, forward(tokenizer.pad({"input_ids": [ids[i] for i in idx]}, return_tensors="np"))):
            out[i] = row
    return np.stack(out)


def test_torch_encode_is_bit_for_bit_the_batches_computed_by_hand(model_dir):
    encoder = SentenceEncoder.load(model_dir, device="cpu")

    def forward(batch):
        with torch.inference_mode():
            return encoder.encoder({k: torch.from_numpy(v.astype(np.int64)) for k, v in batch.items()}).numpy()

    for batch_size in (1, 3, 64):
        got = encoder.encode(SENTENCES, batch_size=batch_size)
        assert np.array_equal(got, _by_hand(encoder.tokenizer, SENTENCES, batch_size, forward))
    assert np.array_equal(encoder(SENTENCES[:2]), got[:2]) and encoder.encode([]).shape == (0, 64)


def test_onnx_encode_is_bit_for_bit_the_batches_computed_by_hand(model_dir, tmp_path):
    from mixcse.models.export import export_onnx

    export_onnx(model_dir, tmp_path / "onnx")
    encoder = open_encoder(tmp_path / "onnx", backend="onnx", threads=1)

    def forward(batch):
        feed = {k: v.astype(np.int64) for k, v in batch.items()}
        feed["token_type_ids"] = np.zeros_like(feed["input_ids"])
        hidden = encoder.graph.run(None, feed)[0]
        m = feed["attention_mask"][..., None].astype(hidden.dtype)
        return (hidden * m).sum(1) / np.clip(m.sum(1), 1.0, None)

    for batch_size in (2, 64):
        assert np.array_equal(encoder.encode(SENTENCES, batch_size=batch_size),
                              _by_hand(encoder.tokenizer, SENTENCES, batch_size, forward))


def test_search_and_similarity_are_shared_and_normalise_once(model_dir):
    encoder = SentenceEncoder.load(model_dir, device="cpu")
    emb = encoder.encode(SENTENCES)
    a = emb / np.clip(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12, None)
    assert np.array_equal(encoder.similarity(emb[:2], emb), a[:2] @ a.T)
    assert SentenceEncoder.search is EncoderBase.search and SentenceEncoder.encode is EncoderBase.encode


def test_torch_threads_apply_while_encoding_only(model_dir):
    before = torch.get_num_threads()
    encoder = open_encoder(model_dir, device="cpu", threads=1)
    seen = []
    forward = encoder._forward
    encoder._forward = lambda *a: (seen.append(torch.get_num_threads()), forward(*a))[1]
    encoder.encode(SENTENCES, batch_size=4)
    assert seen == [1, 1] and torch.get_num_threads() == before


# -------------------------------------------------------------------------------------------- open_encoder
def test_open_encoder_is_the_one_dispatch(model_dir):
    class Fake:
        def encode(self, sentences, batch_size=64):
            return np.zeros((len(sentences), 2), np.float32)

    fake, fn = Fake(), (lambda sentences: np.zeros((len(sentences), 2)))
    assert open_encoder(fake) is fake and open_encoder(fn) is fn
    with pytest.raises(TypeError, match="not an encoder"):
        open_encoder(3)
    with pytest.raises(MixCSEError, match="backend must be one of torch, onnx"):
        SentenceEncoder.load(model_dir, backend="tensorrt")
    with pytest.raises(MixCSEError, match="the onnx backend runs on the CPU"):
        open_encoder(model_dir, backend="onnx", device="cuda")
    loaded = SentenceEncoder.load(model_dir, device="cpu", threads=2)
    assert type(loaded) is SentenceEncoder and loaded.threads == 2 and BACKENDS == ("torch", "onnx")


def test_open_encoder_imports_no_torch(model_dir, tmp_path):
    from mixcse.models.export import export_onnx

    export_onnx(model_dir, tmp_path / "onnx")
    code = ("import sys; sys.modules['torch'] = None\n"
            "from mixcse.models.inference import open_encoder\n"
            f"e = open_encoder({str(tmp_path / 'onnx')!r}, backend='onnx')\n"
            f"print(type(e).__name__, e.encode({SENTENCES[:3]!r}).shape)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["OnnxSentenceEncoder", "(3,", "64)"]


# ------------------------------------------------------------------------------------------------- hashes
@pytest.fixture()
def known_files(tmp_path):
    """Bytes whose digests the earlier per-module hash code gave (recorded before file_digest replaced it)."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "model.safetensors").write_bytes(bytes(range(256)) * 20000 + b"tail")  # > one 4 MiB chunk
    (tmp_path / "sub" / "a.safetensors").write_bytes(b"second file")
    (tmp_path / "config.json").write_text("{}")
    return tmp_path


def test_fingerprints_cache_keys_and_checksums_keep_their_values(known_files):
    from mixcse.data.disk import content_digest
    from mixcse.data.download import _sha256

    weights = known_files / "model.safetensors"
    assert _fingerprint(str(known_files), "avg") == "9bd391783873a14c1aff"  # both weight files, in path order
    assert _fingerprint("sentence-transformers/all-MiniLM-L6-v2", "cls_before_pooler") == "fb5567f07e869c279dd5"
    assert file_digest(weights)[:20] == "77e9972f16a1cd31e19c"  # the onnx backend's graph digest
    assert content_digest(weights) == "281ea5d197a1134d9592ae513ac28469"  # corpus: disk cache key part (BLAKE2b)
    assert _sha256(weights) == (5120004, "77e9972f16a1cd31e19ca22d73da3ec8bd38e0d7564e81a896b4bf5164681280")


def test_file_digest_of_several_files_is_one_hash_of_their_bytes(known_files):
    import hashlib

    a, b = known_files / "sub" / "a.safetensors", known_files / "config.json"
    assert file_digest([a, b], prefix=b"x") == hashlib.sha256(b"x" + a.read_bytes() + b.read_bytes()).hexdigest()
    assert file_digest([], prefix=b"x") == hashlib.sha256(b"x").hexdigest()
    assert file_digest(str(a), algorithm="blake2b", digest_size=8) == \
        hashlib.blake2b(a.read_bytes(), digest_size=8).hexdigest()
