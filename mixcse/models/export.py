"""``mixcse export MODEL --format onnx [--quantize int8] --output DIR``: the model folder plus its ONNX graph.

DIR is the model folder as before (transformers and sentence-transformers load it unchanged; a plain Hugging Face
model gets mixcse's sentence-transformers layout with its pooler), plus, next to the transformer's config.json:

    onnx/model.onnx         the transformer alone: inputs from the tokenizer (input_ids, attention_mask and, for
                            BERT-family models, token_type_ids), output last_hidden_state; dynamic batch and
                            sequence axes; one file (no external-data file); pooling stays in the folder's config.
                            Fused: onnxruntime's Attention, SkipLayerNormalization, BiasGelu... operators (the
                            unfused graph with --no-fuse, or where fusion fails or moves the output)
    onnx/model_qint8.onnx   with --quantize int8: the unfused graph with int8 weights (onnxruntime dynamic
                            quantisation, per channel; the quantiser leaves a fused Attention's weights in fp32)

the layout sentence-transformers' ONNX backend reads; README.md (a section) and, in a mixcse folder, mixcse.json's
``onnx`` entry say which file is which. The graph comes from ``torch.onnx.export`` (the dynamo exporter); it and the
fused graph are checked against the torch model before anything is written to DIR.
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import inspect
import io
import json
import logging
import os
import shutil
import warnings
from pathlib import Path

import numpy as np

from mixcse.errors import MixCSEError
from mixcse.models.onnx_backend import ONNX_DIR, ONNX_FILES, ONNX_POOLERS, open_graph
from mixcse.utils.files import check_new_folder, staged_folder

FORMATS = ("onnx",)
QUANTIZATIONS = ("int8",)
PACKAGES = ("onnx", "onnxscript", "onnxruntime")  # the [onnx] extra
# model_type values whose export is tested against torch (tests/test_onnx.py)
ARCHITECTURES = ("bert", "distilbert", "electra", "modernbert", "mpnet", "roberta", "xlm-roberta")
CHECK_TOLERANCE = 1e-3  # largest |torch - onnx| over the real tokens' hidden states, relative to their largest value
FUSED_TOLERANCE = 1e-4  # the same for the fused graph, else the unfused one is written
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


def fuse_graph(source: Path, target: Path) -> dict[str, int]:
    """``source`` with onnxruntime's fused operators (Attention, SkipLayerNormalization, BiasGelu, ...), written to
    ``target``; returns how many of each operator the fused graph has. The rewrite rules are onnxscript's for
    onnxruntime (``onnxscript.rewriter.ort_fusions``), made for the graphs of the dynamo exporter: onnxruntime's own
    ``transformers.optimizer`` fuses their layer norms and GELUs but not their attention."""
    import onnx_ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    with _quiet():
        model, _ = optimize_for_ort(onnx_ir.load(str(source)))
        onnx_ir.save(model, str(target))
    return dict(collections.Counter(node.op_type for node in model.graph if node.domain == "com.microsoft"))


def _fused(backbone, tokenizer, names: list[str], unfused: Path, fused: Path) -> tuple[dict, float, str | None]:
    """(fusions, relative difference to torch, why the fused graph is not kept or None) of fusing ``unfused``."""
    try:
        fusions = fuse_graph(unfused, fused)
    except Exception as exc:  # a rewrite rule's failure: the unfused graph is kept, the reason recorded
        return {}, float("nan"), f"fusion failed: {(str(exc).strip().splitlines() or [type(exc).__name__])[0]}"
    if not fusions:
        return {}, float("nan"), "no fusion applies to this architecture"
    diff = _check_graph(backbone, tokenizer, names, fused)
    if not diff <= FUSED_TOLERANCE:
        return fusions, diff, f"the fused graph differs from torch by {diff:.1e} > {FUSED_TOLERANCE:g}"
    return fusions, diff, None


def _write_graphs(backbone, tokenizer, names: list[str], work: Path, graph_dir: Path, *, fuse: bool,
                  quantize: str | None) -> dict:
    """The checked graphs in ``graph_dir``: the export, fused when asked and when the fused graph still
    reproduces torch (else the unfused one, and why), then its int8 copy."""
    unfused = work / "export" / "model.onnx"
    try:
        _export_graph(backbone, tokenizer, names, unfused)
    except Exception as exc:  # the exporter's many failure types: one line, the architecture named
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise MixCSEError(f"torch.onnx.export failed on {backbone.config.model_type!r}: {first}") from None
    stray = sorted(p.name for p in unfused.parent.iterdir() if p.name != unfused.name)
    if stray:
        raise MixCSEError(f"the exporter wrote more than one file ({', '.join(stray)}); refusing a split graph")
    diff = _check_graph(backbone, tokenizer, names, unfused)
    if not diff <= CHECK_TOLERANCE:
        raise MixCSEError(f"the exported graph does not reproduce the model: largest relative difference "
                          f"{diff:.2e} > {CHECK_TOLERANCE:g}")
    graph, fusions, why = unfused, {}, "not asked (--no-fuse)"
    if fuse:
        fusions, fused_diff, why = _fused(backbone, tokenizer, names, unfused, work / "fused.onnx")
        if why is None:
            graph, diff = work / "fused.onnx", fused_diff
    graph_dir.mkdir(parents=True, exist_ok=True)
    paths = [graph_dir / ONNX_FILES["fp32"]]
    shutil.copyfile(graph, paths[0])
    graphs = {ONNX_FILES["fp32"]: "fp32, unfused" if why else
              f"fp32, fused ({', '.join(f'{op} {n}' for op, n in fusions.items())})"}
    if quantize == "int8":  # from the unfused graph: the quantiser leaves a fused Attention's weights in fp32
        paths.append(graph_dir / ONNX_FILES["int8"])
        quantize_int8(unfused, paths[1])
        graphs[ONNX_FILES["int8"]] = "int8 weights per channel (dynamic quantisation) of the unfused graph"
    return {"fused": not why, "fusions": fusions if not why else {}, "unfused_because": why, "max_rel_diff": diff,
            "graphs": graphs, "paths": paths}


def _describe(staging: Path, graph_dir: Path, report: dict) -> None:
    """Which file is which, in the folder: the ``onnx`` entry of mixcse.json (in a mixcse folder) and a section
    of README.md (appended; created when the folder has none)."""
    from importlib.metadata import version

    from mixcse.utils.files import read_json_or_none

    where = graph_dir.relative_to(staging)
    entry = {"files": {str(where / name): what for name, what in report["graphs"].items()},
             "fusions": report["fusions"], "unfused_because": report["unfused_because"],
             "max_rel_diff_to_torch": report["max_rel_diff"],
             "versions": {name: version(name) for name in ("onnxruntime", "onnxscript", "torch")}}
    record = read_json_or_none(staging / "mixcse.json")
    if isinstance(record, dict):
        (staging / "mixcse.json").write_text(json.dumps({**record, "onnx": entry}, indent=2) + "\n", encoding="utf-8")
    lines = ["## ONNX files", "", "Written by `mixcse export`: run them with onnxruntime (`mixcse encode --backend "
             "onnx`, or sentence-transformers' ONNX backend).", ""]
    lines += [f"- `{name}`: {what}" for name, what in entry["files"].items()]
    lines += ["", f"`model.onnx` is not fused: {report['unfused_because']}." if report["unfused_because"] else
              "The fused operators are onnxruntime's (`com.microsoft` domain).",
              f"Largest relative difference of its hidden states to torch: {report['max_rel_diff']:.1e}.", ""]
    readme = staging / "README.md"
    head = readme.read_text(encoding="utf-8").rstrip("\n") + "\n\n" if readme.is_file() else ""
    readme.write_text(head + "\n".join(lines), encoding="utf-8")


def quantize_int8(source: Path, target: Path, *, per_channel: bool = True) -> None:
    """onnxruntime dynamic quantisation: int8 weights (per output channel unless ``per_channel=False``), activations
    quantised on the fly."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet():
        quantize_dynamic(str(source), str(target), per_channel=per_channel, weight_type=QuantType.QInt8)


def export_onnx(model_dir: str | os.PathLike, output: str | os.PathLike, quantize: str | None = None, *,
                fuse: bool = True) -> dict:
    """Write ``output``: the model folder of ``model_dir`` plus ``onnx/model.onnx`` (fused unless ``fuse=False``;
    the unfused graph when fusion fails) and with ``quantize="int8"`` ``onnx/model_qint8.onnx`` (from that graph).
    Everything is checked before ``output`` appears (built in a sibling temp folder, then renamed); bad input
    raises `MixCSEError`. Returns what was written: ``files`` with sizes, what each file is (``graphs``), the
    graph's inputs, ``fused``, the ``fusions`` applied (or ``unfused_because``), and the largest relative
    difference of the written fp32 graph to torch (``max_rel_diff``)."""
    if quantize not in (None,) + QUANTIZATIONS:
        raise MixCSEError(f"--quantize must be one of {', '.join(QUANTIZATIONS)}, not {quantize!r}")
    _check_packages()
    output = Path(output)
    check_new_folder(output)
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
    with staged_folder(output) as staging:
        if layout_is_st:  # a sentence-transformers / mixcse folder: kept as it is, a stale onnx/ left out
            shutil.copytree(model_dir, staging,
                            ignore=lambda _, files: [f for f in files if f.startswith(".") or f == ONNX_DIR])
        else:  # a plain HF folder: mixcse's layout, which records the pooler used
            encoder.save(staging, tokenizer, max_seq_length=info["max_seq_length"])
        graph_dir = Path(read_model_dir(staging, framework="np").backbone_path) / ONNX_DIR
        report = {"output": str(output), "inputs": names,
                  **_write_graphs(backbone, tokenizer, names, staging.parent, graph_dir, fuse=fuse,
                                  quantize=quantize)}
        report["files"] = {str(f.relative_to(staging)): f.stat().st_size for f in report.pop("paths")}
        _describe(staging, graph_dir, report)
    return report
