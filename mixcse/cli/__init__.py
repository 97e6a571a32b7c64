"""``mixcse`` command line: train | eval | data | encode | search | export | merge, one module per verb.

    train.py    mixcse train (the run report)          eval.py     mixcse eval
    data.py     mixcse data download                   search.py   mixcse search
    encode.py   mixcse encode (and the model options   export.py   mixcse export
                encode, search and eval share)         merge.py    mixcse merge

A bad command line or input is one ``error:`` line and exit 2. May import every other part of mixcse; nothing in
mixcse imports it.
"""

from __future__ import annotations

import argparse
import sys

from mixcse.errors import MixCSEError


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line as one ``error:`` line (exit 2), like every other bad input."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mixcse", description="Train, evaluate and ship sentence encoders with MixCSE and SimCSE.")
    sub = parser.add_subparsers(dest="command", required=True)

    # Imported unconditionally: a broken import must surface as itself, not as "invalid choice: eval".
    from mixcse.cli.data import add_data_arguments, run_data
    from mixcse.cli.encode import add_encode_arguments, run_encode
    from mixcse.cli.eval import add_eval_arguments, run_eval
    from mixcse.cli.export import add_export_arguments, run_export
    from mixcse.cli.merge import add_merge_arguments, run_merge
    from mixcse.cli.search import add_search_arguments, run_search
    from mixcse.cli.train import add_train_arguments, run_train

    for name, help_text, add_arguments, run in (
            ("train", "train an encoder from a YAML recipe", add_train_arguments, run_train),
            ("eval", "SentEval protocol (STS, transfer, analysis) and retrieval", add_eval_arguments, run_eval),
            ("data", "download benchmark data and the training corpus", add_data_arguments, run_data),
            ("encode", "embed a file of sentences", add_encode_arguments, run_encode),
            ("search", "exact cosine search over a corpus", add_search_arguments, run_search),
            ("export", "write a model folder with its ONNX graph (onnxruntime backend)", add_export_arguments,
             run_export),
            ("merge", "average model folders of one architecture (blends, seed soups)", add_merge_arguments,
             run_merge)):
        p = sub.add_parser(name, help=help_text)
        add_arguments(p)
        p.set_defaults(func=run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except MixCSEError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130

