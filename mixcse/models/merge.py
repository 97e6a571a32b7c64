"""``mixcse merge A B [C ...] --weights ... --output DIR``: weighted averages of model folders of one architecture.

    merge_state_dicts(states, weights)   sum_k w_k * theta_k for every floating tensor (float64, cast back), integer
                                         buffers copied (they must be equal); refuses different keys or shapes
    blend(start, adapted, alpha)         (1 - alpha) * start + alpha * adapted (WiSE-FT); alpha > 1 extrapolates
    merge_models(paths, weights, output) the same over model folders, written as a new model folder

Arithmetic: every term w_k * theta_k and the running sum are float64, and a weight of exactly 0 adds no term. A
float32, bfloat16 or float16 value times 0.5, 1 or any power of two is exact in float64, and so is the sum of two
equal halves, so a model averaged with itself, and ``blend`` at alpha 0 or 1, give the input back bit for bit
(negative zeros, NaN and infinities included: the input with weight 0 never enters the sum). Otherwise the result
is rounded once, from float64 to the tensor's dtype (the widest of the inputs' dtypes for that tensor).

Rules ``merge_models`` checks before it writes anything (each refusal is one ``MixCSEError``):
- at least two inputs, each a local model folder mixcse loads (a Hugging Face, sentence-transformers or mixcse
  folder with safetensors weights), or the name of an installed offline copy;
- one architecture: the configs transformers loads are equal once the fields that do not change the backbone's
  function are dropped (``CONFIG_FIELDS_IGNORED``: the folder's name, the transformers version, the stored dtype and
  ``architectures``, which names the task head a checkpoint was saved with, e.g. an MLM start model, while mixcse
  merges the backbone AutoModel loads);
- one tokenizer: the same vocabulary (token -> id), special tokens, and the same fast-tokenizer pipeline
  (normaliser, pre-tokeniser, model, post-processor, decoder; the stored truncation and padding settings aside,
  since mixcse passes its own) — the same tokenizer written by another transformers version is the same;
- one pooler and head layout (what ``formats.read_model_dir`` reads: the pooler, and SimCSE's MLP head in 2_Dense);
- the weights: one per input, finite, summing to 1 within ``WEIGHT_TOLERANCE``, and none negative unless
  ``allow_extrapolation`` (an affine combination such as (-0.5, 1.5), which steps past the second input along the
  line from the first; weights that do not sum to 1 would scale every weight, LayerNorm gains included, which is
  neither an average nor a point on that line, so they are refused either way);
- the output folder does not exist.

The output is the first input's folder with the merged weights: its tokenizer, modules.json, pooling config,
sentence-transformers configs, README.md and mixcse.json are copied; the backbone's weights and config.json are
what transformers' ``save_pretrained`` writes for the merged backbone (float32, mixcse's master precision; config
and weights then name the same class); 2_Dense/model.safetensors holds the merged MLP head. Weight files the merge
did not make (other formats, onnx/ and openvino/ graphs of the first input) are left out. A plain Hugging Face first
input gets mixcse's sentence-transformers layout with the pooler mixcse loads it with (cls_before_pooler), as
``mixcse export`` does. mixcse.json gets ``merge: {inputs, weights}`` and loses the first input's training record
and measured results (they describe another model); a README.md gets a "Merged from" section. Built in a staging
folder beside the output and renamed into place: a failure leaves nothing behind.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import math
import os
import shutil
from pathlib import Path

import torch

from mixcse.errors import MixCSEError
from mixcse.models import formats
from mixcse.models.hub import offline_copy
from mixcse.utils.files import check_new_folder, normal_modes, read_json_or_none, staged_folder

WEIGHT_TOLERANCE = 1e-6  # |sum of the weights - 1|
CONFIG_FIELDS_IGNORED = ("_name_or_path", "transformers_version", "torch_dtype", "dtype", "architectures")
# what the first input's folder holds that is not copied: weights of any format and exported graphs (stale)
WEIGHT_FILES = ("*.safetensors", "*.safetensors.index.json", "*.bin", "*.bin.index.json", "*.h5", "*.msgpack",
                "*.ckpt", "*.pt", "*.pth", "*.onnx", "*.onnx_data", "*.gguf", "*.ot")
GRAPH_FOLDERS = ("onnx", "openvino")
RECORD_DROPPED = ("training", "summary", "eval")  # the first input's run and its measurements


# ------------------------------------------------------------------------------------------------- tensors
def _merge_tensor(key: str, tensors: list[torch.Tensor], weights: list[float], names: list[str]) -> torch.Tensor:
    first = tensors[0]
    for name, tensor in zip(names[1:], tensors[1:]):
        if tensor.shape != first.shape:
            raise MixCSEError(f"different shapes for {key!r}: {tuple(first.shape)} in {names[0]}, "
                              f"{tuple(tensor.shape)} in {name}")
        if tensor.is_floating_point() != first.is_floating_point():
            raise MixCSEError(f"{key!r} is {first.dtype} in {names[0]} but {tensor.dtype} in {name}")
    if not first.is_floating_point():  # integer and boolean buffers: copied, so they must agree
        for name, tensor in zip(names[1:], tensors[1:]):
            if tensor.dtype != first.dtype or not torch.equal(tensor.to(first.device), first):
                raise MixCSEError(f"{key!r} ({first.dtype}, not averaged) differs between {names[0]} and {name}")
        return first.detach().clone()
    dtype = functools.reduce(torch.promote_types, (t.dtype for t in tensors))
    device = first.device if first.device.type != "mps" else torch.device("cpu")  # mps has no float64
    total = None
    for weight, tensor in zip(weights, tensors):
        if weight == 0.0:
            continue
        term = tensor.detach().to(device=device, dtype=torch.float64) * weight
        total = term if total is None else total.add_(term)
    if total is None:
        total = torch.zeros(first.shape, dtype=torch.float64, device=device)
    return total.to(device=first.device, dtype=dtype)


def merge_state_dicts(states: list[dict[str, torch.Tensor]], weights: list[float], *,
                      names: list[str] | None = None) -> dict[str, torch.Tensor]:
    """sum_k weights[k] * states[k] for every floating tensor, in float64 and cast back to the tensor's dtype;
    non-floating tensors (integer buffers) must be equal across the states and are copied. The key order is the
    first state's; the result shares no storage with the inputs. ``names`` (default "model 1", "model 2", ...)
    name the states in errors. Raises ``MixCSEError`` naming the first key that differs (missing, shape, dtype)."""
    states = list(states)
    weights = [float(w) for w in weights]
    names = list(names) if names is not None else [f"model {k + 1}" for k in range(len(states))]
    if not states:
        raise MixCSEError("nothing to merge: no state dicts given")
    if len(weights) != len(states) or len(names) != len(states):
        raise MixCSEError(f"{len(weights)} weights for {len(states)} models; give one weight per model")
    if not all(math.isfinite(w) for w in weights):
        raise MixCSEError(f"weights must be finite numbers, got {next(w for w in weights if not math.isfinite(w))}")
    for name, state in zip(names[1:], states[1:]):
        missing = next((key for key in states[0] if key not in state), None)
        extra = next((key for key in state if key not in states[0]), None)
        if missing is not None:
            raise MixCSEError(f"different weights: {missing!r} is in {names[0]} but not in {name}")
        if extra is not None:
            raise MixCSEError(f"different weights: {extra!r} is in {name} but not in {names[0]}")
    return {key: _merge_tensor(key, [state[key] for state in states], weights, names) for key in states[0]}


def blend(start_state: dict[str, torch.Tensor], adapted_state: dict[str, torch.Tensor],
          alpha: float) -> dict[str, torch.Tensor]:
    """WiSE-FT: theta = (1 - alpha) * theta_start + alpha * theta_adapted. alpha 0 gives the start and alpha 1 the
    adapted state bit for bit; alpha > 1 (or < 0) extrapolates along the same line. Works on in-memory state dicts
    (``Encoder.state_dict()``: backbone and MLP head)."""
    alpha = float(alpha)
    return merge_state_dicts([start_state, adapted_state], [1.0 - alpha, alpha], names=["the start", "the adapted"])


def check_weights(weights: list[float] | None, count: int, allow_extrapolation: bool = False) -> list[float]:
    """The weights of ``count`` models: equal (1/count) when None; else one per model, finite, summing to 1 within
    ``WEIGHT_TOLERANCE``, and none negative unless ``allow_extrapolation``."""
    if weights is None:
        return [1.0 / count] * count
    weights = [float(w) for w in weights]
    if len(weights) != count:
        raise MixCSEError(f"--weights has {len(weights)} value{'s' if len(weights) != 1 else ''} for {count} models; "
                          f"give one weight per model")
    bad = next((w for w in weights if not math.isfinite(w)), None)
    if bad is not None:
        raise MixCSEError(f"--weights must be finite numbers, got {bad}")
    negative = next((w for w in weights if w < 0), None)
    if negative is not None and not allow_extrapolation:
        raise MixCSEError(f"weight {negative:g} is negative; an average takes weights >= 0 (pass "
                          f"--allow-extrapolation to extrapolate beyond the models)")
    total = math.fsum(weights)
    if abs(total - 1.0) > WEIGHT_TOLERANCE:
        raise MixCSEError(f"--weights sum to {total:.6g}, not 1; merging takes weights that sum to 1")
    return weights


# ------------------------------------------------------------------------------------------------- folders
def _model_folder(name: str) -> tuple[str, formats.ModelDirInfo]:
    """The folder of input ``name`` (a path, or an installed offline copy of a hub name) and what it holds."""
    from mixcse.models.encoder import _check_model_dir

    folder = name if os.path.exists(name) else (offline_copy(name) or name)
    if not os.path.exists(folder):
        raise MixCSEError(f"model path does not exist: {name}")
    if not os.path.isdir(folder):
        raise MixCSEError(f"{name} is not a model folder")
    info = formats.read_model_dir(folder)
    _check_model_dir(info.backbone_path)
    return folder, info


def _config(name: str, info: formats.ModelDirInfo) -> dict:
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(info.backbone_path).to_dict()
    except (OSError, ValueError, KeyError) as exc:
        message = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise MixCSEError(f"cannot load model {name!r}: {message}") from None
    return {key: value for key, value in config.items() if key not in CONFIG_FIELDS_IGNORED}


def _check_same_architecture(names: list[str], configs: list[dict]) -> None:
    """The first config field (model_type first, then alphabetically) in which an input differs from the first."""
    def shown(config: dict, key: str) -> str:
        return f"{key} {config[key]!r}" if key in config else f"no {key}"

    for name, config in zip(names[1:], configs[1:]):
        keys = sorted((k for k in set(configs[0]) | set(config) if config.get(k, ...) != configs[0].get(k, ...)),
                      key=lambda k: (k != "model_type", k))
        if keys:
            more = f" (and {len(keys) - 1} more config field{'s' if len(keys) > 2 else ''})" if len(keys) > 1 else ""
            raise MixCSEError(f"different architectures: {name} has {shown(config, keys[0])}, {names[0]} "
                              f"{shown(configs[0], keys[0])}{more}")


def _tokenizer_identity(tokenizer) -> dict:
    """What decides the token ids a tokenizer gives: vocabulary, special tokens, and a fast tokenizer's pipeline."""
    identity = {"vocabulary": tokenizer.get_vocab(),
                "special tokens": {str(k): str(v) for k, v in tokenizer.special_tokens_map.items()}}
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        pipeline = json.loads(backend.to_str())
        for key in ("normalizer", "pre_tokenizer", "model", "post_processor", "decoder", "added_tokens"):
            identity[key.replace("_", "-")] = pipeline.get(key)
    else:
        identity["class"] = type(tokenizer).__name__
    return identity


def _check_same_tokenizer(names: list[str], tokenizers: list) -> None:
    identities = [_tokenizer_identity(t) for t in tokenizers]
    for name, identity in zip(names[1:], identities[1:]):
        for part, value in identity.items():
            if value != identities[0].get(part):
                detail = (f" ({len(value)} vs {len(identities[0][part])} tokens)"
                          if part == "vocabulary" and len(value) != len(identities[0][part]) else "")
                raise MixCSEError(f"different tokenizers: {name} and {names[0]} differ in their {part}{detail}")


def _check_same_layout(names: list[str], infos: list[formats.ModelDirInfo]) -> None:
    poolers = [info.pooler or "cls_before_pooler" for info in infos]  # load_encoder's default for a plain folder
    for name, pooler in zip(names[1:], poolers[1:]):
        if pooler != poolers[0]:
            raise MixCSEError(f"different poolers: {name} pools with {pooler}, {names[0]} with {poolers[0]}")


# ------------------------------------------------------------------------------------------------- output
def _ignored(folder: str, names: list[str]) -> list[str]:
    """What of the first input is not copied: hidden files, weight files, exported graphs."""
    return [name for name in names if name.startswith(".") or any(fnmatch.fnmatch(name, p) for p in WEIGHT_FILES)
            or (name in GRAPH_FOLDERS and os.path.isdir(os.path.join(folder, name)))]


def _dense_folder(root: Path) -> Path:
    modules = read_json_or_none(root / "modules.json") or []
    return root / next(m.get("path", "") for m in modules if str(m.get("type", "")).endswith(".Dense"))


def _copy_with_weights(first: Path, info: formats.ModelDirInfo, encoder, staging: Path, work: Path) -> None:
    """The first input's sentence-transformers folder, its weights replaced by ``encoder``'s."""
    from safetensors.torch import save_file

    shutil.copytree(first, staging, ignore=_ignored)
    normal_modes(staging)  # a read-only input gives read-only copies
    backbone_dir = staging / Path(info.backbone_path).relative_to(first)
    saved = work / "backbone"
    encoder.backbone.save_pretrained(saved, safe_serialization=True)
    for file in saved.iterdir():
        if file.name == "config.json" or fnmatch.fnmatch(file.name, "*.safetensors") \
                or fnmatch.fnmatch(file.name, "*.safetensors.index.json"):
            os.replace(file, backbone_dir / file.name)
    if encoder.test_pooler == "cls" and encoder.head is not None:  # the MLP head is part of the test-time pooler
        state = {"linear.weight": encoder.head.dense.weight.detach().cpu().contiguous(),
                 "linear.bias": encoder.head.dense.bias.detach().cpu().contiguous()}
        save_file(state, str(_dense_folder(staging) / "model.safetensors"))


def _record_merge(staging: Path, pooler: str, merge: dict) -> None:
    """mixcse.json: the first input's record without its run and results, plus ``merge``; a card gets a note."""
    record = read_json_or_none(staging / "mixcse.json")
    record = {k: v for k, v in record.items() if k not in RECORD_DROPPED} if isinstance(record, dict) else {}
    record.update(pooler=pooler, merge=merge)
    (staging / "mixcse.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    card = staging / "README.md"
    if card.is_file():
        text = card.read_text(encoding="utf-8", errors="replace").rstrip("\n")
        rows = [f"| `{name}` | {weight:g} |" for name, weight in zip(merge["inputs"], merge["weights"])]
        note = ["", "", "## Merged from", "",
                "The weights of this model are the weighted sum of these models' weights (`mixcse merge`, every "
                "tensor summed in float64). The rest of this card was written for the first of them; any figure in "
                "it was measured on that model, not on this one.", "", "| model | weight |", "|---|---|", *rows, ""]
        card.write_text(text + "\n".join(note), encoding="utf-8")


def _write_output(output: Path, first: str, info: formats.ModelDirInfo, loaded: tuple, merge: dict) -> None:
    """Build the output in a staging folder beside it, then rename; on failure nothing is left behind."""
    encoder, tokenizer, load_info = loaded
    with staged_folder(output) as staging:
        if (Path(first) / "modules.json").is_file():
            _copy_with_weights(Path(first), info, encoder, staging, staging.parent)
        else:  # a plain Hugging Face folder: mixcse's layout, which records the pooler used
            encoder.save(staging, tokenizer, max_seq_length=load_info["max_seq_length"])
        _record_merge(staging, encoder.test_pooler, merge)

def load_mergeable(names: list[str]) -> tuple[list[str], list, list]:
    """(folders, what each holds, each loaded as (encoder, tokenizer, info)) of model folders that merge: one
    architecture, one pooler layout, one tokenizer; a refusal raises ``MixCSEError``."""
    from mixcse.models.encoder import load_encoder

    found = [_model_folder(name) for name in names]
    folders, infos = [folder for folder, _ in found], [info for _, info in found]
    _check_same_architecture(names, [_config(name, info) for name, info in zip(names, infos)])
    _check_same_layout(names, infos)
    loaded = [load_encoder(folder) for folder in folders]
    _check_same_tokenizer(names, [tokenizer for _, tokenizer, _ in loaded])
    return folders, infos, loaded


def merge_models(paths: list[str | os.PathLike], weights: list[float] | None = None, *,
                 output: str | os.PathLike, allow_extrapolation: bool = False) -> dict:
    """Write ``output``: the weighted average of the model folders ``paths`` (equal weights by default), as a model
    folder that mixcse, transformers and sentence-transformers load. Every rule (module docstring) is checked before
    anything is written; a refusal raises ``MixCSEError``. Returns ``{output, inputs, weights, pooler, tensors}``."""
    names = [str(p) for p in paths]
    if len(names) < 2:
        raise MixCSEError(f"merge needs at least two models, got {len(names)}")
    weights = check_weights(weights, len(names), allow_extrapolation)
    output = Path(output)
    check_new_folder(output)
    folders, infos, loaded = load_mergeable(names)
    merged = merge_state_dicts([encoder.state_dict() for encoder, _, _ in loaded], weights, names=names)
    del loaded[1:]
    loaded[0][0].load_state_dict(merged)
    _write_output(output, folders[0], infos[0], loaded[0], {"inputs": names, "weights": weights})
    return {"output": str(output), "inputs": names, "weights": weights, "pooler": loaded[0][0].test_pooler,
            "tensors": len(merged)}
