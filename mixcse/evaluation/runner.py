"""`evaluate()`: load every requested task, encode each task's distinct sentences once, then score.

Encoding dominates SentEval's wall time for STS (each pair list is encoded as it comes, duplicates and all);
here each task is one deduplicated pass, so the STS suite costs little more than encoding ~20k distinct
sentences. Tasks are encoded separately so that a task's numbers are the same whatever else is evaluated.
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
from mixcse.evaluation import transfer as T
from mixcse.evaluation.classifiers import DEFAULT_CLASSIFIER, SEED, make_classifier
from mixcse.evaluation.encoding import (
    describe_encoder,
    encode_units,
    encoder_fingerprint,
    gather,
    resolve_encoder,
)
from mixcse.utils.tables import STS_TASKS, TRANSFER_TASKS, markdown_table, number
from mixcse.utils.tables import label as task_label

GROUPS = {"sts": STS_TASKS, "transfer": TRANSFER_TASKS, "analysis": ("analysis",)}
ALL_TASKS = STS_TASKS + TRANSFER_TASKS + ("analysis",)
RETRIEVAL = "retrieval"  # not part of 'all': it needs a BEIR folder (retrieval_data)
PAIRS = "pairs"  # not part of 'all': it needs labelled pair files (pairs_data)
OWN_DATA = (RETRIEVAL, PAIRS)
_ALIASES = {"sts-b": "STSBenchmark", "stsb": "STSBenchmark", "stsbenchmark": "STSBenchmark",
            "sick-r": "SICKRelatedness", "sickr": "SICKRelatedness", "sick": "SICKRelatedness",
            "sickrelatedness": "SICKRelatedness", "sst": "SST2", "sst-2": "SST2", "sst2": "SST2"}
KFOLD = {"test": 10, "fasttest": 5}


def expand_tasks(tasks: str | Iterable[str]) -> list[str]:
    """'all' | group names | task names (comma-separated or a sequence) -> task names in canonical order."""
    if isinstance(tasks, str):
        tasks = [t for t in tasks.split(",")]
    wanted: set[str] = set()
    canon = {t.lower(): t for t in ALL_TASKS}
    for raw in tasks:
        t = raw.strip()
        if not t:
            continue
        key = t.lower()
        if key == "all":
            wanted.update(ALL_TASKS)
        elif key in GROUPS:
            wanted.update(GROUPS[key])
        elif key in canon:
            wanted.add(canon[key])
        elif key in _ALIASES:
            wanted.add(_ALIASES[key])
        elif key in OWN_DATA:
            wanted.add(key)
        else:
            raise ValueError(f"unknown task {t!r}; choose from all, sts, transfer, analysis, retrieval, pairs, "
                             f"{', '.join(ALL_TASKS[:-1])}")
    if not wanted:
        raise ValueError("no tasks given")
    return [t for t in ALL_TASKS + OWN_DATA if t in wanted]


def _load(data_dir: Path, task: str):
    if task in D.STS_SUBSETS:
        return D.load_sts(data_dir, task)
    if task == "STSBenchmark":
        return D.load_stsb(data_dir, "test")
    if task == "SICKRelatedness":
        return D.load_sick(data_dir, "test_annotated")
    if task == "analysis":
        return {split: D.load_stsb(data_dir, split) for split in A.ANALYSIS_SPLITS}
    return T.load_task(data_dir, task)


def _sentences(task: str, loaded) -> list[str]:
    if task in D.STS_SUBSETS or task == "analysis":
        return [s for ps in loaded.values() for s in ps.sentences()]
    if task in ("STSBenchmark", "SICKRelatedness"):
        return loaded.sentences()
    return T.task_sentences(task, loaded)


def _versions() -> dict:
    import scipy
    import sklearn

    out = {"python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__,
           "scikit-learn": sklearn.__version__}
    if "torch" in sys.modules:
        out["torch"] = sys.modules["torch"].__version__
    return out


class _Embeddings:
    """The embeddings of one task's sentences, picklable, for a probe running in a worker process."""

    def __init__(self, row: dict[str, int], matrix: np.ndarray):
        self.row = row
        self.matrix = matrix

    def __call__(self, sentences: list[str]) -> np.ndarray:
        return gather(self.row, self.matrix, sentences)


def _run_transfer(task: str, loaded, embed, clf, kfold: int) -> tuple[dict, float]:
    c0 = time.process_time()
    return T.run_task(task, loaded, embed, clf, kfold, SEED), time.process_time() - c0


def _embedder(units: dict, task: str) -> _Embeddings:
    index, emb = units[task]
    return _Embeddings(index, emb)


def _load_tasks(names: list[str], ddir, retrieval_data, retrieval_split: str, pairs_data) -> dict:
    """Every task's data, read before anything is encoded (a bad file fails first)."""
    loaded = {t: _load(ddir, t) for t in names if t not in OWN_DATA}
    if RETRIEVAL in names:
        loaded[RETRIEVAL] = R.load_beir(retrieval_data, retrieval_split)
    if PAIRS in names:
        loaded[PAIRS] = [P.read_pairs(f) for f in pairs_data]
    return loaded


def _submit_transfer(transfer: list[str], workers: int, loaded: dict, units: dict, clf, kfold: int):
    """With ``workers > 1``, the transfer probes start in worker processes: (pool, {task: (submitted, future)})."""
    if workers <= 1 or len(transfer) <= 1:
        return None, {}
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # spawn, not fork: the parent may hold torch/OpenMP thread pools that a forked child would inherit broken
    pool = ProcessPoolExecutor(max_workers=min(workers, len(transfer)), mp_context=multiprocessing.get_context("spawn"))
    futures = {}
    # the inner-CV tasks (10 x 10 folds x the C grid) first, the larger first: they take most of the time
    for task in sorted(transfer, key=lambda t: (t not in T.INNER_CV_TASKS, -len(units[t][1]))):
        futures[task] = (time.perf_counter(), pool.submit(_run_transfer, task, loaded[task], _embedder(units, task),
                                                          clf, kfold))
    return pool, futures


def _score_task(results: dict, task: str, data, embed, encoder, clf, kfold: int, *, batch_size: int,
                max_seq_length: int | None, cache_dir) -> None:
    """One task's scores into ``results`` (``embed``: the task's sentence embeddings, for the SentEval tasks)."""
    if task in D.STS_SUBSETS:
        results.setdefault("sts", {})[task] = S.score_sts_task(data, embed)
    elif task in ("STSBenchmark", "SICKRelatedness"):
        results.setdefault("sts", {})[task] = S.score_pairs(embed(data.a), embed(data.b), data.scores)
    elif task == "analysis":
        results["analysis"] = A.analyse(data, embed)
    elif task == RETRIEVAL:
        results[RETRIEVAL] = R.evaluate_retrieval(encoder, data, batch_size=batch_size, max_seq_length=max_seq_length,
                                                  cache_dir=cache_dir)
    elif task == PAIRS:
        results[PAIRS] = P.score_pair_sets(encoder, data, batch_size=batch_size)
    else:
        results.setdefault("transfer", {})[task] = T.run_task(task, data, embed, clf, kfold, SEED)


def _settings(names, mode, clf, ddir, encoder, batch_size, workers, cache_dir, enc_stats, loaded,
              pairs_data) -> dict:
    """The protocol of a run, as ``results["settings"]`` records it (timings and versions are added after)."""
    kfold = KFOLD[mode]
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
        **({RETRIEVAL: R.protocol(loaded[RETRIEVAL])} if RETRIEVAL in names else {}),
        **({PAIRS: {"files": [str(f) for f in pairs_data], "similarity": "cosine",
                    "binary_labels": "ap (main; sklearn average_precision_score), accuracy and f1 at best thresholds",
                    "graded_labels": "spearman (main), pearson"}} if PAIRS in names else {}),
    }


def evaluate(encoder: Any, tasks: str | Iterable[str] = ("sts", "transfer", "analysis"), data_dir=None,
             mode: str = "test", classifier: str = DEFAULT_CLASSIFIER, cache_dir=None, batch_size: int = 64, *,
             pooler: str | None = None, verbose: bool = True, workers: int = 1, retrieval_data=None,
             retrieval_split: str = "test", max_seq_length: int | None = None, reference: bool = False,
             precision: str = "fp32", pairs_data=None, backend: str = "torch") -> dict:
    """Run the SentEval protocol (see the package docstring) and return the results dict (x100 scale).

    `encoder`: an object with `.encode(list[str], batch_size=...)`, a callable `list[str] -> array`, or a model
    path (loaded with `SentenceEncoder.load(path, pooler=pooler, precision=precision, backend=backend)`).
    `classifier`: the transfer probe, "senteval-pytorch" (SentEval's PyTorch probe, the papers' protocol) or
    "sklearn-converged" (see `classifiers`). `workers > 1` runs the transfer probes (single-threaded, ~90% of a full
    evaluation's CPU time) in that many processes; each task is computed exactly as in one process, so the results
    are the same. The "retrieval" task reads the BEIR folder `retrieval_data`
    (split `retrieval_split`) and encodes its documents at `max_seq_length` (None: the encoder's own). The "pairs"
    task scores each labelled pair file of `pairs_data` (one path or several; `mixcse.evaluation.pairs`).
    `reference=True` takes the plain paths the fast ones are tested against (unit-by-unit encoding, the probes'
    reference engines): the same numbers, slower."""
    if mode not in KFOLD:
        raise ValueError(f"mode must be 'test' or 'fasttest', not {mode!r}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    clf = make_classifier(classifier, mode, engine="reference" if reference else "fast")
    names = expand_tasks(tasks)
    if RETRIEVAL in names and retrieval_data is None:
        raise D.DataError("the retrieval task needs a BEIR folder (--retrieval-data DIR)")
    if PAIRS in names and not pairs_data:
        raise D.DataError("the pairs task needs labelled pair files (--pairs-data FILE ...)")
    senteval = [t for t in names if t not in OWN_DATA]
    encoder = resolve_encoder(encoder, pooler=pooler, precision=precision, backend=backend)
    ddir = D.resolve_data_dir(data_dir) if senteval else None
    log = (lambda msg: print(f"[mixcse eval] {msg}", file=sys.stderr, flush=True)) if verbose else (lambda m: None)
    seconds: dict[str, float] = {}
    cpu: dict[str, float] = {}  # process CPU time: comparable across runs on a busy machine, unlike wall time
    t_total, c_total = time.perf_counter(), time.process_time()

    t0 = time.perf_counter()
    if PAIRS in names:
        pairs_data = [pairs_data] if isinstance(pairs_data, (str, Path)) else list(pairs_data)
    loaded = _load_tasks(names, ddir, retrieval_data, retrieval_split, pairs_data)
    seconds["load_data"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    units, enc_stats = encode_units(encoder, {t: _sentences(t, loaded[t]) for t in senteval},
                                    batch_size=batch_size, cache_dir=cache_dir, show_progress=verbose,
                                    reference=reference)
    seconds["encode"] = time.perf_counter() - t0
    if senteval:
        log(f"encoded {enc_stats['encoded']} sentences, {enc_stats['cache_hits']} from cache, "
            f"{enc_stats.get('computation', 'task by task')} ({enc_stats['distinct_sentences']} distinct) in "
            f"{seconds['encode']:.1f} s")

    results: dict[str, Any] = {}
    kfold = KFOLD[mode]
    transfer = [t for t in names if t in TRANSFER_TASKS]
    pool, futures = _submit_transfer(transfer, workers, loaded, units, clf, kfold)
    try:
        for task in names:
            t0, c0 = time.perf_counter(), time.process_time()
            if task in futures:
                submitted, future = futures[task]
                results.setdefault("transfer", {})[task], cpu[task] = future.result()
                seconds[task] = time.perf_counter() - submitted  # in parallel with the other workers' tasks
                log(f"{task}: {seconds[task]:.2f} s (worker process)")
                continue
            _score_task(results, task, loaded[task], _embedder(units, task) if task in units else None, encoder, clf,
                        kfold, batch_size=batch_size, max_seq_length=max_seq_length, cache_dir=cache_dir)
            seconds[task] = time.perf_counter() - t0
            cpu[task] = time.process_time() - c0
            log(f"{task}: {seconds[task]:.2f} s")
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
                                    loaded, pairs_data) | {
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
    if RETRIEVAL in results:
        r, rs = results[RETRIEVAL], settings.get(RETRIEVAL, {})
        lines += ([""] if lines else []) + [
            f"Retrieval x100 ({Path(rs.get('data_dir', '?')).name}, split {rs.get('split', '?')}: "
            f"{r['n_queries']} queries, {r['n_documents']} documents, max length {r.get('max_seq_length')})"]
        lines += _row(["nDCG@10", "MAP@10", "MRR@10", "Recall@100"],
                      [number(r[k]) for k in ("ndcg@10", "map@10", "mrr@10", "recall@100")], label)
    if PAIRS in results:
        lines += ([""] if lines else []) + ["Pairs x100 (cosine): AP, accuracy and F1 at the best thresholds for 0/1 "
                                            "labels; Spearman for graded labels"]
        lines += P.format_pairs_table(results[PAIRS])
    secs = settings.get("seconds")
    if secs:
        lines += ["", "Wall time (s): " + ", ".join(f"{k} {v:.1f}" for k, v in secs.items())]
    return "\n".join(lines)
