"""`evaluate()`: a loop over evaluators (one per task, ``tasks.build_evaluators``) and the report.

Every evaluator reads its data first (a bad file fails before anything is encoded); then the units of all of them are
embedded in one pass (``embed.embed_units``: each task's distinct sentences once, in its own length-sorted batches,
so that a task's numbers are the same whatever else is evaluated); then each evaluator scores its embeddings, the
transfer probes optionally in worker processes; each family sums up its section (the averages). ``format_tables``
renders the tables: each family its own (evaluator.py), in the registry's order (tasks.py).
"""
from __future__ import annotations

import platform
import sys
import time
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from mixcse.evaluation import senteval as D
from mixcse.evaluation.embed import describe_encoder, embed_units, encoder_fingerprint
from mixcse.evaluation.evaluator import Evaluator
from mixcse.evaluation.probes import DEFAULT_CLASSIFIER, SEED, make_classifier
from mixcse.evaluation.tasks import (
    ALL_TASKS,
    FAMILIES,
    KFOLD,
    SENTEVAL_SECTIONS,
    build_evaluators,
    check_task_data,
    expand_tasks,
    families,
    family,
    needs_senteval,
)
from mixcse.models.inference import open_encoder

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
    """With ``workers > 1``, the evaluators that score in worker processes (``worker_cost``: the transfer probes)
    start there, the costliest first: (pool, {name: (submitted, future)})."""
    heavy = [ev for ev in evaluators if ev.worker_cost(embedded) is not None]
    if workers <= 1 or len(heavy) <= 1:
        return None, {}
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # spawn, not fork: the parent may hold torch/OpenMP thread pools that a forked child would inherit broken
    pool = ProcessPoolExecutor(max_workers=min(workers, len(heavy)), mp_context=multiprocessing.get_context("spawn"))
    futures = {}
    for ev in sorted(heavy, key=lambda e: e.worker_cost(embedded)):
        futures[ev.name] = (time.perf_counter(), pool.submit(_score_timed, ev, {ev.name: embedded[ev.name]}))
    return pool, futures


def _file(results: dict, evaluator: Evaluator, scores: dict) -> None:
    """Put one evaluator's scores where the results dict keeps its section."""
    if evaluator.per_task:
        results.setdefault(evaluator.section, {})[evaluator.name] = scores
    else:
        results[evaluator.section] = scores


def _settings(names, mode, clf, ddir, encoder, batch_size, workers, cache_dir, enc_stats, evaluators,
              pairs_data, threshold_from=None) -> dict:
    """The protocol of a run, as ``results["settings"]`` records it (timings and versions are added after): the
    run's own settings, then each family's protocol (those of "all" always, the others when they ran)."""
    settings = {
        "tasks": names,
        "mode": mode,
        "kfold": KFOLD[mode],
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
    }
    context = {"tasks": names, "mode": mode, "kfold": KFOLD[mode], "pairs_data": pairs_data,
               "threshold_from": None if threshold_from is None else str(threshold_from)}
    for section in FAMILIES:
        ran = [ev for ev in evaluators if ev.section == section]
        if ran or section in SENTEVAL_SECTIONS:
            protocol = family(section).protocol(ran, context)
            if protocol is not None:
                settings[section] = protocol
    return settings


def evaluate(encoder: Any, tasks: str | Iterable[str] = ("sts", "transfer", "analysis"), data_dir=None,
             mode: str = "test", classifier: str = DEFAULT_CLASSIFIER, cache_dir=None, batch_size: int = 64, *,
             pooler: str | None = None, verbose: bool = True, workers: int = 1, retrieval_data=None,
             retrieval_split: str = "test", max_seq_length: int | None = None, precision: str = "fp32",
             pairs_data=None, backend: str = "torch", threshold_from=None) -> dict:
    """Run the SentEval protocol (see the package docstring) and return the results dict (x100 scale).

    `encoder`: an object with `.encode(list[str], batch_size=...)`, a callable `list[str] -> array`, or a model
    path (opened with `mixcse.models.inference.open_encoder(path, pooler=, precision=, backend=)`).
    `classifier`: the transfer probe, "senteval-pytorch" (SentEval's PyTorch probe, the papers' protocol) or
    "sklearn-converged" (see `probes`). `workers > 1` runs the transfer probes (single-threaded, ~90% of a full
    evaluation's CPU time) in that many processes; each task is computed exactly as in one process, so the results
    are the same. The "retrieval" task reads the BEIR folder `retrieval_data` (split `retrieval_split`) and encodes
    its documents at `max_seq_length` (None: the encoder's own). The "pairs" task scores each labelled pair file of
    `pairs_data` (one path or several; `mixcse.evaluation.pairs`); with `threshold_from` (a labelled 0/1 pair file,
    e.g. a dev split) also F1 at the threshold that maximises F1 on it."""
    if mode not in KFOLD:
        raise ValueError(f"mode must be 'test' or 'fasttest', not {mode!r}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    clf = make_classifier(classifier, mode)
    names = expand_tasks(tasks)
    check_task_data(names, {"retrieval_data": retrieval_data, "pairs_data": pairs_data}, unused=False)
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
                                  pairs_data=pairs_data, threshold_from=threshold_from)
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

    for fam in families(results):
        fam.summarize(results[fam.section])
    seconds["total"] = time.perf_counter() - t_total
    cpu["total"] = time.process_time() - c_total + sum(cpu[t] for t in futures)  # + the worker processes
    log(f"total: {seconds['total']:.1f} s")
    results["settings"] = _settings(names, mode, clf, ddir, encoder, batch_size, workers, cache_dir, enc_stats,
                                    evaluators, pairs_data, threshold_from) | {
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "cpu_seconds": {k: round(v, 3) for k, v in cpu.items()},
        "versions": _versions(),
    }
    return results


# --------------------------------------------------------------------------------------------------- tables
def format_tables(results: dict, label: str | None = None) -> str:
    """Markdown for the terminal: each family's table (the paper's STS row of Spearman x100, 'all' for STS12-16, and
    transfer row of test accuracy first), then the wall time."""
    lines: list[str] = []
    settings = results.get("settings", {})
    for fam in families(results):
        block = fam.table(results[fam.section], settings, label)
        if block:
            lines += ([""] if lines else []) + block
    secs = settings.get("seconds")
    if secs:
        lines += ["", "Wall time (s): " + ", ".join(f"{k} {v:.1f}" for k, v in secs.items())]
    return "\n".join(lines)
