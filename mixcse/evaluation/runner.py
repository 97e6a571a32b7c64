"""`evaluate()`: a loop over evaluators (one per task, ``tasks.build_evaluators``) and the report.

Every evaluator reads its data first (a bad file fails before anything is encoded); then the units of all of them are
embedded in one pass (``embed.embed_units``: each task's distinct sentences once, in its own length-sorted batches,
so that a task's numbers are the same whatever else is evaluated); then each evaluator scores its embeddings, the
transfer probes optionally in worker processes. ``format_tables`` renders the paper-style tables.
"""
from __future__ import annotations

import platform
import sys
import time
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from mixcse.evaluation import analysis as A
from mixcse.evaluation import pairs as P
from mixcse.evaluation import retrieval as R
from mixcse.evaluation import senteval as D
from mixcse.evaluation import sts as S
from mixcse.evaluation.embed import describe_encoder, embed_units, encoder_fingerprint
from mixcse.evaluation.evaluator import Evaluator
from mixcse.evaluation.probes import DEFAULT_CLASSIFIER, SEED, make_classifier
from mixcse.evaluation.tasks import (
    ALL_TASKS,
    KFOLD,
    STS_TASKS,
    TRANSFER_TASKS,
    build_evaluators,
    expand_tasks,
    needs_senteval,
)
from mixcse.evaluation.tasks import label as task_label
from mixcse.models.inference import open_encoder
from mixcse.utils.tables import markdown_table, number

__all__ = ["ALL_TASKS", "evaluate", "expand_tasks", "format_tables"]


def _versions() -> dict:
    import scipy
    import sklearn

    out = {"python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__,
           "scikit-learn": sklearn.__version__}
    if "torch" in sys.modules:
        out["torch"] = sys.modules["torch"].__version__
    return out


def _score_timed(evaluator: Evaluator, embeddings: dict) -> tuple[dict, float]:
    """A worker process's job: one transfer evaluator's results and its CPU time."""
    c0 = time.process_time()
    return evaluator.score(embeddings), time.process_time() - c0


def _submit(evaluators: list[Evaluator], workers: int, embedded: dict):
    """With ``workers > 1``, the transfer probes start in worker processes: (pool, {name: (submitted, future)})."""
    transfer = [ev for ev in evaluators if ev.section == "transfer"]
    if workers <= 1 or len(transfer) <= 1:
        return None, {}
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from mixcse.evaluation.transfer import INNER_CV_TASKS

    # spawn, not fork: the parent may hold torch/OpenMP thread pools that a forked child would inherit broken
    pool = ProcessPoolExecutor(max_workers=min(workers, len(transfer)), mp_context=multiprocessing.get_context("spawn"))
    futures = {}
    # the inner-CV tasks (10 x 10 folds x the C grid) first, the larger first: they take most of the time
    for ev in sorted(transfer, key=lambda e: (e.name not in INNER_CV_TASKS, -len(embedded[e.name].matrix))):
        futures[ev.name] = (time.perf_counter(), pool.submit(_score_timed, ev, {ev.name: embedded[ev.name]}))
    return pool, futures


def _file(results: dict, evaluator: Evaluator, scores: dict) -> None:
    """Put one evaluator's scores where the results dict keeps its section."""
    if evaluator.section in ("sts", "transfer"):
        results.setdefault(evaluator.section, {})[evaluator.name] = scores
    else:
        results[evaluator.section] = scores


def _settings(names, mode, clf, ddir, encoder, batch_size, workers, cache_dir, enc_stats, evaluators,
              pairs_data) -> dict:
    """The protocol of a run, as ``results["settings"]`` records it (timings and versions are added after)."""
    kfold = KFOLD[mode]
    retrieval = next((ev for ev in evaluators if ev.section == "retrieval"), None)
    return {
        "tasks": names,
        "mode": mode,
        "kfold": kfold,
        "seed": SEED,
        "classifier": clf.settings(),
        "data_dir": str(ddir.resolve()) if ddir is not None else None,
        "encoder": describe_encoder(encoder),
        "fingerprint": encoder_fingerprint(encoder),
        "precision": getattr(encoder, "precision", None),  # None: an encoder object that does not say
        "backend": getattr(encoder, "backend", "torch" if hasattr(encoder, "encode_units") else None),
        "batch_size": batch_size,
        "workers": workers,
        "cache_dir": str(cache_dir) if cache_dir is not None else None,
        "encoding": enc_stats,
        "scale": "x100",
        "sts": {"similarity": "cosine", "regressor": None,
                "headline": "spearman = Spearman over all subsets pooled ('all'); 'wmean' = per-subset "
                            "Spearman averaged weighted by subset size; 'mean' = unweighted",
                "stsb_split": "test", "sick_split": "test_annotated", "blank_gold_lines": "skipped"},
        "transfer": {"reported": "test accuracy", "mrpc_features": "[|u-v|, u*v]",
                     "protocols": {"MR/CR/SUBJ/MPQA": f"{kfold}-fold stratified CV, L2 picked by inner "
                                                      f"{kfold}-fold CV on each training split",
                                   "SST2": "L2 picked on dev, test accuracy",
                                   "TREC/MRPC": f"L2 picked by {kfold}-fold CV on train, refit on train"}},
        "analysis": {"stsb_splits": list(A.ANALYSIS_SPLITS), "positive_threshold": A.POSITIVE_THRESHOLD,
                     "t": A.T, "normalised": True, "angles": "degrees, over all pairs of distinct sentences"},
        **({"retrieval": R.protocol(retrieval.data)} if retrieval is not None else {}),
        **({"pairs": {"files": [str(f) for f in pairs_data], "similarity": "cosine",
                      "binary_labels": "ap (main; sklearn average_precision_score), accuracy and f1 at best "
                                       "thresholds",
                      "graded_labels": "spearman (main), pearson"}} if "pairs" in names else {}),
    }


def evaluate(encoder: Any, tasks: str | Iterable[str] = ("sts", "transfer", "analysis"), data_dir=None,
             mode: str = "test", classifier: str = DEFAULT_CLASSIFIER, cache_dir=None, batch_size: int = 64, *,
             pooler: str | None = None, verbose: bool = True, workers: int = 1, retrieval_data=None,
             retrieval_split: str = "test", max_seq_length: int | None = None, precision: str = "fp32",
             pairs_data=None, backend: str = "torch") -> dict:
    """Run the SentEval protocol (see the package docstring) and return the results dict (x100 scale).

    `encoder`: an object with `.encode(list[str], batch_size=...)`, a callable `list[str] -> array`, or a model
    path (opened with `mixcse.models.inference.open_encoder(path, pooler=, precision=, backend=)`).
    `classifier`: the transfer probe, "senteval-pytorch" (SentEval's PyTorch probe, the papers' protocol) or
    "sklearn-converged" (see `probes`). `workers > 1` runs the transfer probes (single-threaded, ~90% of a full
    evaluation's CPU time) in that many processes; each task is computed exactly as in one process, so the results
    are the same. The "retrieval" task reads the BEIR folder `retrieval_data` (split `retrieval_split`) and encodes
    its documents at `max_seq_length` (None: the encoder's own). The "pairs" task scores each labelled pair file of
    `pairs_data` (one path or several; `mixcse.evaluation.pairs`)."""
    if mode not in KFOLD:
        raise ValueError(f"mode must be 'test' or 'fasttest', not {mode!r}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    clf = make_classifier(classifier, mode)
    names = expand_tasks(tasks)
    if "retrieval" in names and retrieval_data is None:
        raise D.DataError("the retrieval task needs a BEIR folder (--retrieval-data DIR)")
    if "pairs" in names and not pairs_data:
        raise D.DataError("the pairs task needs labelled pair files (--pairs-data FILE ...)")
    if "pairs" in names:
        pairs_data = [pairs_data] if isinstance(pairs_data, (str, Path)) else list(pairs_data)
    encoder = open_encoder(encoder, pooler=pooler, precision=precision, backend=backend)
    ddir = D.resolve_data_dir(data_dir) if needs_senteval(names) else None
    log = (lambda msg: print(f"[mixcse eval] {msg}", file=sys.stderr, flush=True)) if verbose else (lambda m: None)
    seconds: dict[str, float] = {}
    cpu: dict[str, float] = {}  # process CPU time: comparable across runs on a busy machine, unlike wall time
    t_total, c_total = time.perf_counter(), time.process_time()

    t0 = time.perf_counter()
    evaluators = build_evaluators(names, data_dir=ddir, classifier=clf, mode=mode, retrieval_data=retrieval_data,
                                  retrieval_split=retrieval_split, max_seq_length=max_seq_length,
                                  pairs_data=pairs_data)
    seconds["load_data"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    units = {unit: sentences for ev in evaluators for unit, sentences in ev.units().items()}
    embedded, enc_stats = embed_units(encoder, units, batch_size=batch_size, cache_dir=cache_dir,
                                      show_progress=verbose)
    seconds["encode"] = time.perf_counter() - t0
    if units:
        log(f"encoded {enc_stats['encoded']} sentences, {enc_stats['cache_hits']} from cache, "
            f"{enc_stats.get('computation', 'task by task')} ({enc_stats['distinct_sentences']} distinct) in "
            f"{seconds['encode']:.1f} s")

    results: dict[str, Any] = {}
    pool, futures = _submit(evaluators, workers, embedded)
    try:
        for ev in evaluators:
            t0, c0 = time.perf_counter(), time.process_time()
            if ev.name in futures:
                submitted, future = futures[ev.name]
                scores, cpu[ev.name] = future.result()
                _file(results, ev, scores)
                seconds[ev.name] = time.perf_counter() - submitted  # in parallel with the other workers' tasks
                log(f"{ev.name}: {seconds[ev.name]:.2f} s (worker process)")
                continue
            _file(results, ev, ev.score(embedded, encoder, batch_size=batch_size, cache_dir=cache_dir))
            seconds[ev.name] = time.perf_counter() - t0
            cpu[ev.name] = time.process_time() - c0
            log(f"{ev.name}: {seconds[ev.name]:.2f} s")
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)

    if "sts" in results:
        results["sts"]["avg"] = S.finite_mean(results["sts"][t]["spearman"] for t in STS_TASKS
                                              if t in results["sts"])
    if "transfer" in results:
        results["transfer"]["avg"] = S.finite_mean(results["transfer"][t]["acc"] for t in TRANSFER_TASKS
                                                   if t in results["transfer"])
    seconds["total"] = time.perf_counter() - t_total
    cpu["total"] = time.process_time() - c_total + sum(cpu[t] for t in futures)  # + the worker processes
    log(f"total: {seconds['total']:.1f} s")
    results["settings"] = _settings(names, mode, clf, ddir, encoder, batch_size, workers, cache_dir, enc_stats,
                                    evaluators, pairs_data) | {
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "cpu_seconds": {k: round(v, 3) for k, v in cpu.items()},
        "versions": _versions(),
    }
    return results


# --------------------------------------------------------------------------------------------------- tables
def _row(cols: list[str], vals: list[str], label: str | None) -> list[str]:
    head = (["Model"] if label is not None else []) + cols
    return markdown_table(head, [([label] if label is not None else []) + vals])


def format_tables(results: dict, label: str | None = None) -> str:
    """Paper-style markdown: one STS row (Spearman x100, 'all' for STS12-16) and one transfer row (test acc)."""
    lines: list[str] = []
    settings = results.get("settings", {})
    if "sts" in results:
        tasks = [t for t in STS_TASKS if t in results["sts"]]
        lines.append("STS: Spearman x100 of cosine similarity ('all' aggregation for STS12-16)")
        lines += _row([task_label(t) for t in tasks] + ["Avg."],
                      [number(results["sts"][t]["spearman"]) for t in tasks] + [number(results["sts"].get("avg"))],
                      label)
    if "transfer" in results:
        tasks = [t for t in TRANSFER_TASKS if t in results["transfer"]]
        clf = settings.get("classifier", {}).get("classifier", "?")
        lines += ([""] if lines else []) + [
            f"Transfer: test accuracy x100 (logistic regression, classifier={clf}, mode={settings.get('mode', '?')})"]
        lines += _row([task_label(t) for t in tasks] + ["Avg."],
                      [number(results["transfer"][t]["acc"]) for t in tasks]
                      + [number(results["transfer"].get("avg"))],
                      label)
        if "MRPC" in results["transfer"]:
            lines.append(f"(MRPC F1: {number(results['transfer']['MRPC'].get('f1'))})")
    if "analysis" in results:
        a = results["analysis"]
        lines += ([""] if lines else []) + [
            "Analysis (STS-B dev+test, normalised): "
            f"alignment {a['alignment']:.4f}, uniformity {a['uniformity']:.4f}, "
            f"max angle {a['max_angle']:.2f} deg, mean angle {a['mean_angle']:.2f} deg"]
    if "retrieval" in results:
        r, rs = results["retrieval"], settings.get("retrieval", {})
        lines += ([""] if lines else []) + [
            f"Retrieval x100 ({Path(rs.get('data_dir', '?')).name}, split {rs.get('split', '?')}: "
            f"{r['n_queries']} queries, {r['n_documents']} documents, max length {r.get('max_seq_length')})"]
        lines += _row(["nDCG@10", "MAP@10", "MRR@10", "Recall@100"],
                      [number(r[k]) for k in ("ndcg@10", "map@10", "mrr@10", "recall@100")], label)
    if "pairs" in results:
        lines += ([""] if lines else []) + ["Pairs x100 (cosine): AP, accuracy and F1 at the best thresholds for 0/1 "
                                            "labels; Spearman for graded labels"]
        lines += P.format_pairs_table(results["pairs"])
    secs = settings.get("seconds")
    if secs:
        lines += ["", "Wall time (s): " + ", ".join(f"{k} {v:.1f}" for k, v in secs.items())]
    return "\n".join(lines)
