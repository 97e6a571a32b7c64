"""ONNX export (`mixcse export`, `mixcse.models.export.export_onnx`) and the onnxruntime backend (`backend="onnx"`).

The exported graph against the torch model: fp32 embeddings equal to 1e-4 (BERT-family, ModernBERT with
sliding-window attention, the other supported architectures, the ModernBERT stand-in), at batch sizes and lengths
the graph was not traced with; int8 cosine to fp32; the folder still loads in transformers and
sentence-transformers; the backend imports no torch; bad input refused with one `error:` line, nothing written.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import FILLER, STAND_IN, TOPICS, make_tiny_bert, needs_example_data

from mixcse.cli import main
from mixcse.models.export import export_onnx
from mixcse.models.sentence_encoder import SentenceEncoder

VOCAB = FILLER + [w for topic in TOPICS for w in topic]
# lengths 1..~60 words: the export traces a batch of 2 short sentences
WORDS = [w for topic in TOPICS for w in topic]
SENTENCES = [" ".join(WORDS[(7 * i) % len(WORDS):][:1 + (i * 11) % 60] or WORDS[:3]) for i in range(23)]
ENGLISH = ["A man is playing a guitar.", "Someone is making music on a stage.", "The cat sat on the mat.",
           "A woman slices an onion in the kitchen.", "Two dogs run across a snowy field.",
           "The stock market fell sharply on Monday after the announcement.", "Is it going to rain tomorrow?",
           "Children are playing football in the park.", "He read the whole novel in one night.",
           "The committee approved the new budget for the hospital.", "A plane takes off from the airport.",
           "Please turn off the lights when you leave the room."]


def _max_diff(folder: Path, sentences: list[str], batch_size: int, **kw) -> float:
    a = SentenceEncoder.load(folder, device="cpu", **kw).encode(sentences, batch_size=batch_size)
    b = SentenceEncoder.load(folder, backend="onnx", **kw).encode(sentences, batch_size=batch_size)
    assert a.shape == b.shape and b.dtype == np.float32
    return float(np.abs(a - b).max())


def _tiny_modernbert_sliding(directory: Path) -> Path:
    """ModernBERT with a sliding window of 8 tokens on every other layer, so that sentences longer than the window
    exercise the local-attention mask."""
    import torch
    from transformers import BertTokenizer, ModernBertConfig, ModernBertModel

    directory.mkdir(parents=True)
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + VOCAB
    BertTokenizer(vocab={t: i for i, t in enumerate(tokens)}, do_lower_case=True).save_pretrained(directory)
    torch.manual_seed(0)
    config = ModernBertConfig(vocab_size=len(tokens), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=64, max_position_embeddings=128, local_attention=8,
                              global_attn_every_n_layers=2, pad_token_id=0, cls_token_id=2, sep_token_id=3,
                              bos_token_id=2, eos_token_id=3)
    assert "sliding_attention" in config.layer_types
    ModernBertModel(config).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def bert_onnx(tiny_bert, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("onnx") / "bert"
    export_onnx(tiny_bert, out)
    return out


@pytest.fixture(scope="module")
def stand_in_onnx(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("onnx") / "stand-in"
    assert main(["export", str(STAND_IN), "--format", "onnx", "--quantize", "int8", "--output", str(out)]) == 0
    return out


@pytest.mark.parametrize("pooler", ["avg", "cls_before_pooler"])
def test_bert_fp32_equals_torch_at_untraced_shapes(bert_onnx, pooler):
    import onnx

    model = onnx.load(str(bert_onnx / "onnx" / "model.onnx"))
    assert [i.name for i in model.graph.input] == ["input_ids", "attention_mask", "token_type_ids"]
    assert [o.name for o in model.graph.output] == ["last_hidden_state"]
    dims = [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input]
    assert all(isinstance(a, str) and isinstance(b, str) for a, b in dims)  # symbolic batch and sequence axes
    assert sorted(os.listdir(bert_onnx / "onnx")) == ["model.onnx"]  # one file, no external data
    fused = {n.op_type for n in model.graph.node if n.domain == "com.microsoft"}
    assert {"Attention", "SkipLayerNormalization", "BiasGelu"} <= fused  # the default export is the fused graph
    for batch_size in (1, 5, 64):  # traced at batch 2, a dozen tokens; here up to ~60 tokens
        assert _max_diff(bert_onnx, SENTENCES, batch_size, pooler=pooler) <= 1e-4


def test_unfused_graph_on_request_and_when_fusion_fails(tiny_bert, tmp_path, monkeypatch, capsys):
    """--no-fuse writes standard ONNX operators only; a fusion that fails leaves the unfused graph, and the
    export report, README.md and mixcse.json say which file is which."""
    import json

    import onnx

    from mixcse.models import export

    assert main(["export", str(tiny_bert), "--no-fuse", "--quantize", "int8", "--output", str(tmp_path / "plain")]) == 0
    out = capsys.readouterr().out
    assert "onnx/model.onnx" in out and "fp32, unfused" in out and "of the unfused graph" in out
    graph = onnx.load(str(tmp_path / "plain" / "onnx" / "model.onnx"))
    assert {n.domain for n in graph.graph.node} <= {"", "ai.onnx"}
    assert _max_diff(tmp_path / "plain", SENTENCES, 7, pooler="avg") <= 1e-4

    def broken(source, target):
        raise RuntimeError("no rule matched\nsecond line")

    monkeypatch.setattr(export, "fuse_graph", broken)
    report = export_onnx(tiny_bert, tmp_path / "fallback")
    assert not report["fused"] and report["unfused_because"] == "fusion failed: no rule matched"
    assert report["graphs"] == {"model.onnx": "fp32, unfused"}
    assert "is not fused: fusion failed: no rule matched" in (tmp_path / "fallback" / "README.md").read_text()
    entry = json.loads((tmp_path / "fallback" / "mixcse.json").read_text())["onnx"]
    assert entry["files"] == {"onnx/model.onnx": "fp32, unfused"} and entry["max_rel_diff_to_torch"] <= 1e-3
    assert _max_diff(tmp_path / "fallback", SENTENCES, 3, pooler="avg") <= 1e-4


def test_the_exported_folder_says_which_file_is_which(bert_onnx):
    import json

    entry = json.loads((bert_onnx / "mixcse.json").read_text())["onnx"]
    assert entry["files"]["onnx/model.onnx"].startswith("fp32, fused (") and entry["unfused_because"] is None
    assert entry["fusions"]["Attention"] == 2 and set(entry["versions"]) == {"onnxruntime", "onnxscript", "torch"}
    assert "- `onnx/model.onnx`: fp32, fused (" in (bert_onnx / "README.md").read_text()


def test_modernbert_sliding_window_fp32_equals_torch(tmp_path):
    out = tmp_path / "out"
    export_onnx(_tiny_modernbert_sliding(tmp_path / "mb"), out)
    import onnx

    assert [i.name for i in onnx.load(str(out / "onnx" / "model.onnx")).graph.input] == ["input_ids",
                                                                                          "attention_mask"]
    for batch_size in (1, 7):
        assert _max_diff(out, SENTENCES, batch_size, pooler="avg") <= 1e-4


@pytest.mark.parametrize("model_type", ["distilbert", "electra", "mpnet", "roberta", "xlm-roberta"])
def test_other_supported_architectures(model_type, tmp_path):
    import torch
    from transformers import AutoConfig, AutoModel, BertTokenizer

    src = tmp_path / model_type
    src.mkdir()
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + VOCAB
    BertTokenizer(vocab={t: i for i, t in enumerate(tokens)}, do_lower_case=True).save_pretrained(src)
    size = dict(dim=32, n_layers=2, n_heads=2, hidden_dim=64) if model_type == "distilbert" else \
        dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    torch.manual_seed(0)
    AutoModel.from_config(AutoConfig.for_model(model_type, vocab_size=len(tokens), max_position_embeddings=130,
                                               pad_token_id=0, **size)).save_pretrained(src)
    export_onnx(src, tmp_path / "out")
    assert _max_diff(tmp_path / "out", SENTENCES, 6, pooler="avg") <= 1e-4


@needs_example_data(STAND_IN)
def test_stand_in_fp32_and_int8(stand_in_onnx):
    assert sorted(os.listdir(stand_in_onnx / "onnx")) == ["model.onnx", "model_qint8.onnx"]
    assert _max_diff(stand_in_onnx, ENGLISH, 5) <= 1e-4
    fp32 = SentenceEncoder.load(stand_in_onnx, device="cpu").encode(ENGLISH)
    int8 = SentenceEncoder.load(stand_in_onnx, backend="onnx", precision="int8").encode(ENGLISH)
    cosine = (fp32 * int8).sum(1) / np.linalg.norm(fp32, axis=1) / np.linalg.norm(int8, axis=1)
    assert cosine.min() >= 0.95
    assert not np.allclose(fp32, int8, atol=1e-4)  # the quantised graph is another computation
    sizes = {p.name: p.stat().st_size for p in (stand_in_onnx / "onnx").iterdir()}
    assert sizes["model_qint8.onnx"] < 0.4 * sizes["model.onnx"]


@needs_example_data(STAND_IN)
def test_exported_folder_loads_as_before(stand_in_onnx):
    """transformers and sentence-transformers (torch) load the folder; its pooling config is the one applied."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    assert type(AutoModel.from_pretrained(stand_in_onnx)).__name__ == "ModernBertModel"
    st = SentenceTransformer(str(stand_in_onnx), device="cpu").encode(ENGLISH, convert_to_numpy=True)
    ours = SentenceEncoder.load(stand_in_onnx, backend="onnx").encode(ENGLISH)
    assert np.abs(st - ours).max() <= 1e-4


def test_backend_needs_no_torch(bert_onnx):
    """The onnx backend in a process where importing torch fails."""
    code = ("import sys; sys.modules['torch'] = None\n"
            "from mixcse.models.onnx_backend import OnnxSentenceEncoder\n"
            f"e = OnnxSentenceEncoder.load({str(bert_onnx)!r}, pooler='avg')\n"
            f"print(e.encode({SENTENCES[:4]!r}).shape, 'torch' in sys.modules and sys.modules['torch'] is not None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).parent, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["(4,", "64)", "False"]


@needs_example_data(STAND_IN)
def test_eval_backend_onnx_matches_torch(stand_in_onnx, capsys, tmp_path):
    """(A random tiny model's cosines all lie within ~1e-5 of each other, so its Spearman moves with 1e-6 noise: the
    stand-in's do not.)"""
    fixture = Path(__file__).parent / "fixtures" / "eval" / "downstream"
    runs = {}
    for backend in ("torch", "onnx"):
        out = tmp_path / f"{backend}.json"
        assert main(["eval", str(stand_in_onnx), "--tasks", "STS12,STSBenchmark,TREC", "--mode", "fasttest",
                     "--data-dir", str(fixture), "--backend", backend, "--output", str(out),
                     "--batch-size", "8"]) == 0
        import json

        runs[backend] = json.loads(out.read_text())
    capsys.readouterr()
    assert runs["onnx"]["settings"]["backend"] == "onnx" and runs["torch"]["settings"]["backend"] == "torch"
    for task in ("STS12", "STSBenchmark"):
        assert abs(runs["onnx"]["sts"][task]["spearman"] - runs["torch"]["sts"][task]["spearman"]) <= 0.01
    assert abs(runs["onnx"]["transfer"]["TREC"]["acc"] - runs["torch"]["transfer"]["TREC"]["acc"]) <= 0.01


# ------------------------------------------------------------------------------------------------ bad input
def _snapshot(root: Path) -> dict[str, int]:
    return {str(p): p.stat().st_size if p.is_file() else -1 for p in root.rglob("*")}


def _refused(capsys, argv: list[str], fragment: str, *roots: Path) -> None:
    before = [_snapshot(r) for r in roots]
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert rc == 2 and len(lines) == 1 and fragment in lines[0], err
    assert "Traceback" not in err
    assert [_snapshot(r) for r in roots] == before, "a refused export wrote files"


def test_export_refuses_unsupported_architecture(tmp_path, capsys):
    import torch
    from transformers import AlbertConfig, AlbertModel, BertTokenizer

    src = tmp_path / "albert"
    src.mkdir()
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + VOCAB
    BertTokenizer(vocab={t: i for i, t in enumerate(tokens)}).save_pretrained(src)
    torch.manual_seed(0)
    AlbertModel(AlbertConfig(vocab_size=len(tokens), embedding_size=16, hidden_size=32, num_hidden_layers=1,
                             num_attention_heads=2, intermediate_size=64)).save_pretrained(src)
    _refused(capsys, ["export", str(src), "--output", str(tmp_path / "out")], "cannot export architecture 'albert'",
             tmp_path)


@pytest.mark.parametrize("missing", ["onnx", "onnxscript", "onnxruntime"])
def test_export_refuses_without_onnx_packages(missing, tiny_bert, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, missing, None)  # `import missing` raises ImportError
    _refused(capsys, ["export", str(tiny_bert), "--output", str(tmp_path / "out")],
             f"needs {missing}: pip install 'mixcse[onnx]'", tmp_path, tiny_bert)


def test_export_refuses_layer_averaging_pooler(tmp_path, capsys):
    import torch

    from mixcse.models.encoder import Encoder, load_backbone

    src = make_tiny_bert(tmp_path / "plain", vocab=VOCAB)
    backbone, tokenizer = load_backbone(str(src))
    Encoder(backbone, "avg_first_last").save(tmp_path / "layers", tokenizer)
    assert torch  # the folder is written by torch; the refusal comes before any export
    _refused(capsys, ["export", str(tmp_path / "layers"), "--output", str(tmp_path / "out")],
             "pooler 'avg_first_last' averages several layers", tmp_path)


def test_backend_refusals(bert_onnx, tiny_bert, tmp_path, capsys):
    (tmp_path / "s.txt").write_text("a sentence\n")
    args = ["--input", str(tmp_path / "s.txt"), "--output", str(tmp_path / "e.npy")]
    _refused(capsys, ["encode", str(bert_onnx), *args, "--backend", "onnx", "--precision", "int8"],
             "no onnx/model_qint8.onnx; write it with `mixcse export", tmp_path)
    _refused(capsys, ["encode", str(bert_onnx), *args, "--backend", "onnx", "--device", "cuda"],
             "the onnx backend runs on the CPU", tmp_path)
    _refused(capsys, ["encode", str(bert_onnx), *args, "--backend", "onnx", "--pooler", "avg_top2"],
             "pooler 'avg_top2' needs every layer's hidden states", tmp_path)
    _refused(capsys, ["eval", str(bert_onnx), "--backend", "onnx", "--precision", "bf16"],
             "--precision bf16 needs --backend torch", tmp_path)
