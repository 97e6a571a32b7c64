"""``mixcse export MODEL --format onnx [--quantize int8] --output DIR``: the model folder plus its ONNX graph.

DIR is the model folder as before (transformers and sentence-transformers load it unchanged; a plain Hugging Face
model gets mixcse's sentence-transformers layout with its pooler), plus, next to the transformer's config.json:

    onnx/model.onnx         the transformer alone: inputs from the tokenizer (input_ids, attention_mask and, for
                            BERT-family models, token_type_ids), output last_hidden_state; dynamic batch and
                            sequence axes; one file (no external-data file); pooling stays in the folder's config
    onnx/model_qint8.onnx   with --quantize int8: weights int8 (onnxruntime dynamic quantisation, per channel)

the layout sentence-transformers' ONNX backend reads. The graph comes from ``torch.onnx.export`` (the dynamo
exporter) and is checked against the torch model before anything is written to DIR.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import logging
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np

from mixcse.errors import MixCSEError
from mixcse.models.onnx_backend import ONNX_DIR, ONNX_FILES, ONNX_POOLERS, open_graph
from mixcse.utils.files import normal_file_mode, unwritable_reason

FORMATS = ("onnx",)
QUANTIZATIONS = ("int8",)
PACKAGES = ("onnx", "onnxscript", "onnxruntime")  # the [onnx] extra
# model_type values whose export is tested against torch (tests/test_onnx.py)
ARCHITECTURES = ("bert", "distilbert", "electra", "modernbert", "mpnet", "roberta", "xlm-roberta")
CHECK_TOLERANCE = 1e-3  # largest |torch - onnx| over the real tokens' hidden states, relative to their largest value
CHECK_SENTENCES = ["A man is playing a guitar on a stage in front of a small crowd.", "Hello.",
                   "The quick brown fox jumps over the lazy dog, and then it runs away into the forest."]


def _check_packages() -> None:
    missing = []
    for name in PACKAGES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise MixCSEError(f"export to ONNX needs {', '.join(missing)}: pip install 'mixcse[onnx]'")


def _check_output(output: Path) -> None:
    if output.exists() or output.is_symlink():
        raise MixCSEError(f"output {output} exists; choose a new folder")
    reason = unwritable_reason(output)
    if reason:
        raise MixCSEError(f"cannot write --output {output}: {reason}")


@contextlib.contextmanager
def _quiet():
    """The exporter and the quantiser report their steps on stdout, warnings and log records: not the user's
    business when the result is checked."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)


def _normal_modes(root: Path) -> None:
    """Folders and files as the user's umask would make them (mkdtemp and temp files are private)."""
    file_mode = normal_file_mode()
    dir_mode = file_mode | ((file_mode & 0o444) >> 2)  # +x wherever +r
    os.chmod(root, dir_mode)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), dir_mode)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), file_mode)


def _graph_module(backbone):
    """The backbone as a module of the tokenizer's inputs that returns last_hidden_state only."""
    import torch

    class LastHiddenState(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = backbone

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
            if token_type_ids is not None:
                kwargs["token_type_ids"] = token_type_ids
            return self.backbone(**kwargs, return_dict=True).last_hidden_state

    return LastHiddenState().eval()


def _input_names(backbone, tokenizer) -> list[str]:
    """The tokenizer's inputs that the model takes, input_ids and attention_mask first."""
    accepted = set(inspect.signature(backbone.forward).parameters)
    names = ["input_ids", "attention_mask"]
    if "token_type_ids" in tokenizer.model_input_names and "token_type_ids" in accepted:
        names.append("token_type_ids")
    return names


def _export_graph(backbone, tokenizer, names: list[str], path: Path) -> None:
    import torch

    batch = tokenizer(["a sentence to trace the graph with, long enough to pad the other", "a short one"],
                      padding=True, return_tensors="pt")
    kwargs = {name: batch[name] if name in batch else torch.zeros_like(batch["input_ids"]) for name in names}
    dims = {0: torch.export.Dim("batch"), 1: torch.export.Dim("sequence")}
    path.parent.mkdir(parents=True, exist_ok=True)
    with _quiet(), torch.no_grad():
        program = torch.onnx.export(_graph_module(backbone), (), kwargs=kwargs, input_names=names,
                                    output_names=["last_hidden_state"], dynamo=True, external_data=False,
                                    dynamic_shapes={name: dims for name in names}, optimize=True, verbose=False)
        program.save(str(path), external_data=False)


def _check_graph(backbone, tokenizer, names: list[str], path: Path) -> float:
    """Largest relative |Δ| of the real tokens' hidden states between the graph and torch, at a batch size and
    lengths other than the traced ones."""
    import torch

    batch = tokenizer(CHECK_SENTENCES, padding=True, return_tensors="np")
    feed = {name: batch[name].astype(np.int64) if name in batch else np.zeros_like(batch["input_ids"], np.int64)
            for name in names}
    got = open_graph(path).run(["last_hidden_state"], feed)[0]
    with torch.no_grad():
        want = backbone(**{k: torch.from_numpy(v) for k, v in feed.items()}, return_dict=True)
    want = want.last_hidden_state.float().numpy()
    mask = feed["attention_mask"][..., None].astype(bool)
    if got.shape != want.shape:
        return float("inf")
    return float(np.abs(np.where(mask, got - want, 0)).max() / max(np.abs(np.where(mask, want, 0)).max(), 1e-12))


def quantize_int8(source: Path, target: Path, *, per_channel: bool = True) -> None:
    """onnxruntime dynamic quantisation: int8 weights (per output channel unless ``per_channel=False``), activations
    quantised on the fly."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet():
        quantize_dynamic(str(source), str(target), per_channel=per_channel, weight_type=QuantType.QInt8)


def export_onnx(model_dir: str | os.PathLike, output: str | os.PathLike, quantize: str | None = None) -> dict:
    """Write ``output``: the model folder of ``model_dir`` plus ``onnx/model.onnx`` (and ``onnx/model_qint8.onnx``
    with ``quantize="int8"``). Everything is checked before ``output`` appears (built in a sibling temp folder,
    then renamed); bad input raises `MixCSEError`. Returns what was written: files with sizes, the graph's inputs,
    the check's largest relative difference to torch."""
    if quantize not in (None,) + QUANTIZATIONS:
        raise MixCSEError(f"--quantize must be one of {', '.join(QUANTIZATIONS)}, not {quantize!r}")
    _check_packages()
    output = Path(output)
    _check_output(output)
    model_dir = str(model_dir)
    if not os.path.isdir(model_dir):
        raise MixCSEError(f"{model_dir} is not a model folder" if os.path.exists(model_dir)
                          else f"model path does not exist: {model_dir}")
    from mixcse.models.formats import read_model_dir
    from mixcse.models.encoder import load_encoder

    encoder, tokenizer, info = load_encoder(model_dir)
    backbone = encoder.backbone.eval()
    model_type = getattr(backbone.config, "model_type", None)
    if model_type not in ARCHITECTURES:
        raise MixCSEError(f"cannot export architecture {model_type!r} to ONNX; supported: {', '.join(ARCHITECTURES)}")
    if encoder.test_pooler not in ONNX_POOLERS:
        raise MixCSEError(f"pooler {encoder.test_pooler!r} averages several layers; the ONNX graph gives the last "
                          f"layer only (poolers {', '.join(ONNX_POOLERS)})")
    names = _input_names(backbone, tokenizer)
    layout_is_st = (Path(model_dir) / "modules.json").is_file()
    created = [d for d in reversed(output.absolute().parents) if not d.exists()]  # removed again on failure
    output.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    done = False
    try:
        staging = work / "model"
        if layout_is_st:  # a sentence-transformers / mixcse folder: kept as it is, a stale onnx/ left out
            shutil.copytree(model_dir, staging,
                            ignore=lambda _, files: [f for f in files if f.startswith(".") or f == ONNX_DIR])
        else:  # a plain HF folder: mixcse's layout, which records the pooler used
            encoder.save(staging, tokenizer, max_seq_length=info["max_seq_length"])
        graph_dir = Path(read_model_dir(staging, framework="np").backbone_path) / ONNX_DIR
        fp32 = graph_dir / ONNX_FILES["fp32"]
        try:
            _export_graph(backbone, tokenizer, names, fp32)
        except Exception as exc:  # the exporter's many failure types: one line, the architecture named
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise MixCSEError(f"torch.onnx.export failed on {model_type!r}: {first}") from None
        stray = sorted(p.name for p in graph_dir.iterdir() if p.name != fp32.name)
        if stray:
            raise MixCSEError(f"the exporter wrote more than one file ({', '.join(stray)}); refusing a split graph")
        diff = _check_graph(backbone, tokenizer, names, fp32)
        if not diff <= CHECK_TOLERANCE:
            raise MixCSEError(f"the exported graph does not reproduce the model: largest relative difference "
                              f"{diff:.2e} > {CHECK_TOLERANCE:g}")
        files = [fp32]
        if quantize == "int8":
            files.append(graph_dir / ONNX_FILES["int8"])
            quantize_int8(fp32, files[-1])
        report = {"output": str(output), "inputs": names, "max_rel_diff": diff,
                  "files": {str(f.relative_to(staging)): f.stat().st_size for f in files}}
        if output.exists():  # appeared while exporting
            raise MixCSEError(f"output {output} exists; choose a new folder")
        _normal_modes(staging)
        os.replace(staging, output)
        done = True
    finally:
        shutil.rmtree(work, ignore_errors=True)
        for folder in reversed(created if not done else []):
            with contextlib.suppress(OSError):
                folder.rmdir()
    return report
