"""The on-disk model format: a Hugging Face model directory that is also a sentence-transformers model.

Layout written by mixcse (the layout sentence-transformers 6 writes, so ``SentenceTransformer(dir)`` loads it):

    config.json, model.safetensors, tokenizer files   -> transformers.AutoModel / AutoTokenizer
    modules.json                                       -> module list: Transformer, Pooling, [Dense]
    sentence_bert_config.json, config_sentence_transformers.json
    1_Pooling/config.json                              -> the test-time pooler
    2_Dense/{config.json,model.safetensors}            -> only when the MLP head is part of the test-time pooler
    mixcse.json                                        -> mixcse's own record: pooler name, recipe, versions

Layer-averaging poolers (avg_first_last, avg_top2) have no sentence-transformers equivalent, so their Pooling step is
``mixcse.integrations.st_modules.LayerAveragePooling`` (importable once mixcse is installed).
Reading accepts directories written by sentence-transformers 2.x-6.x as well.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mixcse.errors import MixCSEError
from mixcse.utils.files import read_json

ST_TRANSFORMER = "sentence_transformers.base.modules.transformer.Transformer"
ST_POOLING = "sentence_transformers.sentence_transformer.modules.pooling.Pooling"
ST_DENSE = "sentence_transformers.base.modules.dense.Dense"
LAYER_POOLING = "mixcse.integrations.st_modules.LayerAveragePooling"

# mixcse pooler -> sentence-transformers pooling_mode (single-layer poolers only)
ST_POOLING_MODE = {"cls_before_pooler": "cls", "cls": "cls", "avg": "mean"}
# layer-averaging pooler -> the two hidden-state indices it averages (0 = embeddings, 1 = first transformer layer)
LAYER_POOLERS = {"avg_first_last": (1, -1), "avg_top2": (-2, -1)}


@dataclass
class ModelDirInfo:
    backbone_path: str
    pooler: str | None = None
    head_state: dict | None = None
    max_seq_length: int | None = None


def _pooler_from_st_config(cfg: dict) -> str:
    mode = cfg.get("pooling_mode")
    if mode is None:  # sentence-transformers < 6 stored one boolean per mode
        modes = [k[len("pooling_mode_"):] for k, v in cfg.items() if k.startswith("pooling_mode_") and v is True]
        mode = {"cls_token": "cls", "mean_tokens": "mean"}.get(modes[0] if len(modes) == 1 else "", None)
    pooler = {"cls": "cls_before_pooler", "mean": "avg"}.get(mode)
    if pooler is None:
        raise MixCSEError(f"unsupported sentence-transformers pooling {cfg}; mixcse supports cls and mean")
    return pooler


def check_safetensors(path: str | os.PathLike) -> None:
    """Read a weights file's header: a truncated or non-safetensors file is named here, before a loader fails on it
    with a message that names no file."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy"):
            pass
    except (SafetensorError, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise MixCSEError(f"damaged weights file {path} ({reason}): it is truncated or not a safetensors file; "
                          f"copy or download the model again") from None


def read_model_dir(path: str | os.PathLike, *, framework: str = "pt") -> ModelDirInfo:
    """What a local model directory holds: a plain HF model, or a sentence-transformers/mixcse model.

    ``framework``: the MLP head's weights as torch tensors ("pt") or numpy arrays ("np", no torch import)."""
    root = Path(path)
    modules_file = root / "modules.json"
    if not modules_file.exists():
        return ModelDirInfo(str(root))
    info = ModelDirInfo(str(root))
    for module in read_json(modules_file):
        kind, sub = module.get("type", ""), root / module.get("path", "")
        if kind.endswith(".Transformer"):
            info.backbone_path = str(sub)
            st_cfg = sub / "sentence_bert_config.json"
            if st_cfg.exists():
                info.max_seq_length = read_json(st_cfg).get("max_seq_length")
            if info.max_seq_length is None and (sub / "tokenizer_config.json").exists():
                # sentence-transformers 6 saves max_seq_length as the tokenizer's model_max_length
                limit = read_json(sub / "tokenizer_config.json").get("model_max_length")
                if isinstance(limit, int) and 0 < limit < 1_000_000:  # not the "no limit" sentinel
                    info.max_seq_length = limit
        elif kind.endswith(".Pooling") and kind != LAYER_POOLING:
            info.pooler = _pooler_from_st_config(read_json(sub / "config.json"))
        elif kind == LAYER_POOLING:
            layers = tuple(read_json(sub / "config.json")["layers"])
            info.pooler = next(k for k, v in LAYER_POOLERS.items() if v == layers)
        elif kind.endswith(".Dense"):
            if framework == "np":
                from safetensors.numpy import load_file
            else:
                from safetensors.torch import load_file

            # Only SimCSE's MLP head (square dense + tanh on [CLS]) has a mixcse equivalent; any other Dense
            # (e.g. a projection after mean pooling) would silently give other embeddings.
            dense = read_json(sub / "config.json")
            if (info.pooler != "cls_before_pooler" or not str(dense.get("activation_function")).endswith(".Tanh")
                    or dense.get("in_features") != dense.get("out_features") or not dense.get("bias", True)
                    or dense.get("use_residual") or not (sub / "model.safetensors").exists()):
                raise MixCSEError(f"{modules_file}: unsupported Dense module {dense}; mixcse supports a Dense only "
                                  f"as the MLP head (in = out, tanh, bias, safetensors) after cls pooling")
            check_safetensors(sub / "model.safetensors")
            state = load_file(str(sub / "model.safetensors"))
            info.head_state = {"dense.weight": state["linear.weight"], "dense.bias": state["linear.bias"]}
            info.pooler = "cls"
        elif kind.endswith(".Normalize"):
            continue  # cosine similarity is scale-free
        else:
            raise MixCSEError(f"{modules_file}: unsupported sentence-transformers module {kind!r}")
    return info


def _write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")


def write_model_dir(
    directory: Path,
    backbone,
    tokenizer,
    *,
    pooler: str,
    head=None,
    max_seq_length: int | None = None,
) -> None:
    """Write atomically: build in a sibling temp dir, then swap it in, so a crash never leaves half a model."""
    import torch
    import transformers
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        backbone.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        hidden = backbone.config.hidden_size
        modules = [{"idx": 0, "name": "0", "path": "", "type": ST_TRANSFORMER}]
        if pooler in LAYER_POOLERS:
            modules.append({"idx": 1, "name": "1", "path": "1_Pooling", "type": LAYER_POOLING})
            _write_json(tmp / "1_Pooling/config.json", {"embedding_dimension": hidden,
                                                        "layers": list(LAYER_POOLERS[pooler])})
        else:
            modules.append({"idx": 1, "name": "1", "path": "1_Pooling", "type": ST_POOLING})
            _write_json(tmp / "1_Pooling/config.json", {"embedding_dimension": hidden,
                                                        "pooling_mode": ST_POOLING_MODE[pooler],
                                                        "include_prompt": True})
        if head is not None:
            modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": ST_DENSE})
            _write_json(tmp / "2_Dense/config.json", {
                "in_features": hidden, "out_features": hidden, "bias": True,
                "activation_function": "torch.nn.modules.activation.Tanh",
                "module_input_name": "sentence_embedding", "module_output_name": "sentence_embedding"})
            state = {"linear.weight": head.dense.weight.detach().cpu().contiguous(),
                     "linear.bias": head.dense.bias.detach().cpu().contiguous()}
            save_file(state, str(tmp / "2_Dense/model.safetensors"))
        _write_json(tmp / "modules.json", modules)
        st_config = {"transformer_task": "feature-extraction",
                     "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
                     "module_output_name": "token_embeddings"}
        if pooler in LAYER_POOLERS:  # LayerAveragePooling reads every layer: ask the Transformer module for them
            st_config["config_kwargs"] = {"output_hidden_states": True}
        if max_seq_length:
            st_config["max_seq_length"] = max_seq_length
        _write_json(tmp / "sentence_bert_config.json", st_config)
        _write_json(tmp / "config_sentence_transformers.json", {
            "__version__": {"pytorch": torch.__version__, "transformers": transformers.__version__},
            "model_type": "SentenceTransformer", "prompts": {}, "default_prompt_name": None,
            "similarity_fn_name": "cosine"})
        _write_json(tmp / "mixcse.json", {"pooler": pooler})
        if directory.exists():
            old = directory.with_name(f".{directory.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(directory, old)
            os.replace(tmp, directory)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
