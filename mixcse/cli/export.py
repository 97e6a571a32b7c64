"""``mixcse export MODEL --format onnx [--quantize int8] [--no-fuse] --output DIR`` (see mixcse/models/export.py)."""

from __future__ import annotations

from pathlib import Path

from mixcse.models.export import FORMATS, QUANTIZATIONS, export_onnx


def add_export_arguments(p) -> None:
    p.description = ("Write a copy of a model folder with its ONNX graph (onnx/model.onnx: the transformer's "
                     "last_hidden_state, fused into onnxruntime's operators; pooling stays in the folder's config), "
                     "the layout sentence-transformers' ONNX backend reads; `--backend onnx` on encode, search and "
                     "eval runs it with onnxruntime.")
    p.add_argument("model", help="mixcse, sentence-transformers or Hugging Face model folder")
    p.add_argument("--format", choices=FORMATS, default="onnx", help="export format (default onnx)")
    p.add_argument("--quantize", choices=QUANTIZATIONS, default=None,
                   help="also write onnx/model_qint8.onnx: int8 weights, per-channel dynamic quantisation")
    p.add_argument("--no-fuse", action="store_true",
                   help="write the exporter's graph of standard ONNX operators, without onnxruntime's fused "
                        "Attention, SkipLayerNormalization and BiasGelu")
    p.add_argument("--output", required=True, metavar="DIR", help="new folder to write (must not exist)")


def run_export(args) -> int:
    report = export_onnx(args.model, args.output, quantize=args.quantize, fuse=not args.no_fuse)
    print(f"wrote {report['output']}")
    for path, size in report["files"].items():
        print(f"  {path} ({size / 1e6:.1f} MB): {report['graphs'][Path(path).name]}")
    why = f"; not fused: {report['unfused_because']}" if report["unfused_because"] and not args.no_fuse else ""
    print(f"  inputs {', '.join(report['inputs'])}; largest relative difference to torch "
          f"{report['max_rel_diff']:.1e}{why}")
    return 0
