"""The onnxruntime backend: ``SentenceEncoder.load(path, backend="onnx")`` on a folder written by ``mixcse export``.

Same tokenisation, truncation (the model's own ``max_seq_length``), length-sorted batches, pooling and MLP head as
the torch `SentenceEncoder`, computed by onnxruntime on ``onnx/model.onnx`` (the transformer's token embeddings,
``last_hidden_state``) and numpy. Imports numpy, the tokenizer and onnxruntime only: no torch at run time.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from mixcse.errors import MixCSEError
from mixcse.models.formats import ModelDirInfo, read_model_dir
from mixcse.models.inference import EncoderBase
from mixcse.models.pooling import pool
from mixcse.utils.files import file_digest

ONNX_DIR = "onnx"
ONNX_FILES = {"fp32": "model.onnx", "int8": "model_qint8.onnx"}  # each of PRECISIONS["onnx"] -> its file in onnx/
ONNX_POOLERS = ("cls_before_pooler", "cls", "avg")  # poolers of last_hidden_state (no per-layer outputs)


def onnx_file(model_dir: str | os.PathLike, precision: str = "fp32") -> Path:
    """Where a model folder keeps its ONNX graph: ``onnx/`` next to the transformer's config.json."""
    return Path(read_model_dir(model_dir, framework="np").backbone_path) / ONNX_DIR / ONNX_FILES[precision]


def _max_positions(config_file: Path) -> int | None:
    import json

    try:
        value = json.loads(config_file.read_text(encoding="utf-8")).get("max_position_embeddings")
    except (OSError, ValueError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def open_graph(path: str | os.PathLike, threads: int | None = None):
    """onnxruntime's CPU runtime over an ONNX file; ``threads``: intra-op threads (default: onnxruntime's own)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class OnnxSentenceEncoder(EncoderBase):
    """Frozen sentence embeddings from an exported ONNX graph; the interface of `SentenceEncoder` (encode,
    search, similarity, pooler, max_seq_length, fingerprint, precision, dimension): `EncoderBase`'s encode loop
    around onnxruntime's forward pass."""

    backend = "onnx"

    def __init__(self, graph, tokenizer, *, pooler: str, head: dict | None, max_seq_length: int,
                 max_positions: int | None, fingerprint: str, precision: str):
        self.graph = graph  # an onnxruntime runtime object over the exported graph (open_graph)
        self.tokenizer = tokenizer
        self._pooler = pooler
        self._head = head
        self.max_seq_length = max_seq_length
        self.max_positions = max_positions
        self.fingerprint = fingerprint
        self.precision = precision
        self._inputs = [i.name for i in graph.get_inputs()]
        self.dimension = int(graph.get_outputs()[0].shape[-1])

    @classmethod
    def load(cls, path: str | os.PathLike, *, pooler: str | None = None, precision: str = "fp32",
             threads: int | None = None) -> "OnnxSentenceEncoder":
        """``precision``: "fp32" (onnx/model.onnx) or "int8" (onnx/model_qint8.onnx, from ``--quantize int8``).
        ``threads``: onnxruntime's intra-op threads (default: its own, one per physical core)."""
        if precision not in ONNX_FILES:
            raise MixCSEError(f"the onnx backend's precision must be one of {', '.join(ONNX_FILES)}, "
                              f"not {precision!r}")
        root = Path(path)
        if not root.is_dir():
            raise MixCSEError(f"the onnx backend needs a local model folder written by `mixcse export`, not {path}")
        info: ModelDirInfo = read_model_dir(root, framework="np")
        graph = Path(info.backbone_path) / ONNX_DIR / ONNX_FILES[precision]
        if not graph.is_file():
            hint = " --quantize int8" if precision == "int8" else ""
            raise MixCSEError(f"{path} has no {graph.relative_to(root)}; write it with `mixcse export {path} "
                              f"--format onnx{hint} --output DIR` and load DIR")
        chosen = pooler or info.pooler or "cls_before_pooler"
        if chosen not in ONNX_POOLERS:
            raise MixCSEError(f"pooler {chosen!r} needs every layer's hidden states; the ONNX graph gives the last "
                              f"layer only ({', '.join(ONNX_POOLERS)})")
        head = None
        if chosen == "cls":
            if info.head_state is None:
                raise MixCSEError(f"pooler 'cls' needs the folder's MLP head (2_Dense), and {path} has none")
            head = {k: np.asarray(v, dtype=np.float32) for k, v in info.head_state.items()}
        try:
            import onnxruntime  # noqa: F401
            from transformers import AutoTokenizer
            from transformers.utils import logging as hf_logging
        except ImportError as exc:
            raise MixCSEError(f"the onnx backend needs onnxruntime: pip install 'mixcse[onnx]' ({exc})") from None
        hf_logging.set_verbosity_error()
        tokenizer = AutoTokenizer.from_pretrained(info.backbone_path)
        try:
            runtime = open_graph(graph, threads)
        except Exception as exc:  # onnxruntime raises its own exception types for a bad file
            raise MixCSEError(f"cannot load {graph}: {str(exc).splitlines()[0][:300]}") from None
        limit = _max_positions(Path(info.backbone_path) / "config.json") or 512
        max_seq_length = min(info.max_seq_length or limit, limit)
        fingerprint = f"onnx-{precision}-{file_digest(graph)[:20]}-{chosen}"
        return cls(runtime, tokenizer, pooler=chosen, head=head, max_seq_length=max_seq_length,
                   max_positions=limit, fingerprint=fingerprint, precision=precision)

    @property
    def pooler(self) -> str:
        return self._pooler

    @classmethod
    def open(cls, name_or_path: str | os.PathLike, *, pooler: str | None = None, precision: str = "fp32",
             device: str | None = None, threads: int | None = None, trust_remote_code: bool = False):
        """The onnx backend of `mixcse.models.inference.open_encoder` (which refuses ``device`` and
        ``trust_remote_code`` for it)."""
        return cls.load(name_or_path, pooler=pooler, precision=precision, threads=threads)

    def _forward(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        feed = {"input_ids": input_ids, "attention_mask": attention_mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(input_ids)  # what the torch path's backbone defaults to
        pooled = pool(self._pooler, self.graph.run(None, {k: feed[k] for k in self._inputs})[0], attention_mask)
        if self._head is not None:
            pooled = np.tanh(pooled @ self._head["dense.weight"].T + self._head["dense.bias"])
        return pooled.astype(np.float32, copy=False)
