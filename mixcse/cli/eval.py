"""``mixcse eval MODEL``: the SentEval protocol, retrieval and labelled pairs, through the evaluators of
mixcse.evaluation; a user-facing failure (missing data, bad file, refused overwrite) is one `error: ...` line and
exit 2, so that scripts can tell a data problem from a crash."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from mixcse.cli.options import BACKENDS, INFERENCE_PRECISIONS, check_backend, check_files
from mixcse.cli.options import error as _error
from mixcse.errors import MixCSEError
from mixcse.evaluation.probes import CLASSIFIER_ALIASES, CLASSIFIERS, DEFAULT_CLASSIFIER
from mixcse.evaluation.runner import evaluate, format_tables
from mixcse.evaluation.tasks import check_task_data, expand_tasks
from mixcse.models import inference
from mixcse.utils.files import atomic_write_json, check_new_output, to_jsonable


def add_eval_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.description = ("Evaluate a sentence encoder with the SentEval protocol, or on a retrieval set (BEIR "
                          "layout). A mixcse model directory (one with mixcse.json) gets the results added to its "
                          "model card README.md and mixcse.json.")
    parser.add_argument("model", help="mixcse output dir, sentence-transformers dir, or HF model path/name")
    parser.add_argument("--tasks", default="all",
                        help="comma-separated: all | sts | transfer | analysis | task names (STS12 ... "
                             "SICKRelatedness, MR, CR, SUBJ, MPQA, SST2, TREC, MRPC) | retrieval (needs "
                             "--retrieval-data; not part of all) | pairs (needs --pairs-data; not part of all); "
                             "default: all")
    parser.add_argument("--mode", choices=("test", "fasttest"), default="test",
                        help="test: 10-fold CV, full grids (the published protocol); fasttest: 5 folds, smaller grids")
    parser.add_argument("--pooler", default=None, help="pooler for a plain HF model (e.g. cls, cls_before_pooler, avg)")
    parser.add_argument("--classifier", choices=list(CLASSIFIERS) + list(CLASSIFIER_ALIASES),
                        default=DEFAULT_CLASSIFIER,
                        help="transfer probe: senteval-pytorch (default; alias torch): SentEval's PyTorch logistic "
                             "regression, the protocol of the SimCSE/MixCSE papers; sklearn-converged (alias "
                             "sklearn): scikit-learn LogisticRegression solved to convergence on SentEval's C grids")
    parser.add_argument("--data-dir", default=None,
                        help="SentEval data (the downstream/ folder or its parent); default: $MIXCSE_DATA, then "
                             "./data, then the folder `mixcse data download` fills (~/.cache/mixcse/data)")
    parser.add_argument("--output", default=None, help="write every number and the exact settings as JSON here")
    parser.add_argument("--overwrite", action="store_true", help="allow replacing an existing --output file")
    parser.add_argument("--cache-dir", default=None, help="on-disk embedding cache, keyed by model fingerprint")
    parser.add_argument("--batch-size", type=int, default=64, help="encoding batch size (default 64)")
    parser.add_argument("--backend", choices=BACKENDS, default="torch",
                        help="torch (default), or onnx: onnxruntime on the folder's onnx/model.onnx from `mixcse "
                             "export` (docs/integration.md); model cards keep torch fp32 results only")
    parser.add_argument("--precision", choices=INFERENCE_PRECISIONS, default="fp32",
                        help="bf16 (torch backend): encode under bfloat16 autocast, ~2x faster on CPUs with "
                             "AVX512-BF16/AMX and on GPUs; STS moves by ~0.01, a transfer probe's choice of L2 can "
                             "flip (MRPC -0.87 measured): for quick looks, not for tables (docs/evaluation.md); "
                             "int8 (onnx backend): onnx/model_qint8.onnx, results labelled precision int8")
    parser.add_argument("--retrieval-data", default=None,
                        help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv) for --tasks retrieval")
    parser.add_argument("--pairs-data", nargs="+", default=None, metavar="FILE",
                        help="labelled pair files (.tsv/.csv: sentence1, sentence2, label) for --tasks pairs: "
                             "cosine AP, accuracy and F1 for 0/1 labels, Spearman for graded ones")
    parser.add_argument("--threshold-from", default=None, metavar="DEV.tsv",
                        help="a labelled 0/1 pair file (e.g. the dev split) for --tasks pairs: also report F1 at the "
                             "threshold that maximises F1 there (the F1 column is at each file's own best threshold)")
    parser.add_argument("--split", default="test", help="qrels split for the retrieval task (default test)")
    parser.add_argument("--max-seq-length", type=int, default=None,
                        help="token limit for the retrieval task's queries and documents (default: the model's)")
    parser.add_argument("--workers", type=int, default=1,
                        help="processes for the transfer probes (default 1); one per idle core cuts a full "
                             "evaluation's wall time roughly by that factor, results unchanged")
    return parser


def run_eval(args: argparse.Namespace) -> int:
    try:
        output = check_new_output(args.output, args.overwrite) if args.output else None
    except MixCSEError as exc:
        return _error(str(exc))
    try:
        tasks = expand_tasks(args.tasks)
    except ValueError as exc:
        return _error(str(exc))
    if args.batch_size < 1:
        return _error("--batch-size must be at least 1")
    if args.workers < 1:
        return _error("--workers must be at least 1")
    retrieval_data, pairs_data = getattr(args, "retrieval_data", None), getattr(args, "pairs_data", None)
    try:
        check_task_data(tasks, {"retrieval_data": retrieval_data, "pairs_data": pairs_data})
        check_files(pairs_data, "--pairs-data")
        threshold_from = getattr(args, "threshold_from", None)
        if threshold_from is not None:
            if pairs_data is None:
                raise MixCSEError("--threshold-from needs --tasks pairs and --pairs-data")
            check_files([threshold_from], "--threshold-from")
    except MixCSEError as exc:
        return _error(str(exc))
    if getattr(args, "max_seq_length", None) is not None and args.max_seq_length < 1:
        return _error("--max-seq-length must be at least 1")
    if args.cache_dir is not None and Path(args.cache_dir).exists() and not Path(args.cache_dir).is_dir():
        return _error(f"--cache-dir {args.cache_dir} exists and is not a folder")
    backend = getattr(args, "backend", "torch")
    try:
        check_backend(backend, args.precision)
    except MixCSEError as exc:
        return _error(str(exc))
    try:
        encoder = inference.open_encoder(args.model, pooler=args.pooler, precision=args.precision, backend=backend)
        results = evaluate(encoder, tasks=tasks, data_dir=args.data_dir, mode=args.mode, classifier=args.classifier,
                           cache_dir=args.cache_dir, batch_size=args.batch_size, workers=args.workers,
                           retrieval_data=retrieval_data, retrieval_split=getattr(args, "split", "test"),
                           max_seq_length=getattr(args, "max_seq_length", None), pairs_data=pairs_data,
                           threshold_from=threshold_from)
    except (MixCSEError, FileNotFoundError) as exc:
        return _error(str(exc))
    pooler = args.pooler or getattr(encoder, "pooler", None)
    results["settings"].update(model=str(args.model), pooler=pooler if isinstance(pooler, str) else None,
                               cli_args={k: v for k, v in vars(args).items()
                                         if isinstance(v, (str, int, float, bool, type(None)))})
    print(format_tables(results))
    results["settings"]["backend"] = backend
    if args.precision == "fp32" and backend == "torch":
        _update_card(args.model, results)
    if output is not None:
        try:
            check_new_output(output, args.overwrite)  # it may have appeared during the evaluation
        except MixCSEError as exc:
            return _error(str(exc))
        atomic_write_json(output, to_jsonable(results))
        print(f"\nwrote {output}")
    return 0


def _update_card(model, results: dict) -> None:
    """A mixcse model directory gets its STS / transfer table added to its model card."""
    if not isinstance(model, (str, os.PathLike)) or not (Path(model) / "mixcse.json").is_file():
        return
    from mixcse.evaluation.modelcard import update_model_card_with_eval

    update_model_card_with_eval(Path(model), to_jsonable(results))
    print(f"updated the model card {Path(model) / 'README.md'}")
