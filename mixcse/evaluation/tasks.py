"""The task registry: every task ``mixcse eval --tasks`` knows, in the paper's order, and the evaluator that scores it.

    STS_TASKS, TRANSFER_TASKS, ALL_TASKS    task names in the order of the paper's tables ("all" = these + analysis)
    OWN_DATA                                tasks that need the user's files and are not part of "all"
    label(task)                             the column label ("STSBenchmark" -> "STS-B")
    expand_tasks("sts,MR,pairs")            names, groups and aliases -> task names in canonical order
    build_evaluators(names, ...)            -> one ``Evaluator`` per task (the pairs task: one for all its files)

Adding a task means one evaluator class and one entry in ``EVALUATORS``.
"""
from __future__ import annotations

from typing import Callable, Iterable

from mixcse.evaluation.evaluator import Evaluator

STS_TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
ALL_TASKS = STS_TASKS + TRANSFER_TASKS + ("analysis",)
OWN_DATA = ("retrieval", "pairs")  # not part of "all": they need the user's own files
GROUPS = {"sts": STS_TASKS, "transfer": TRANSFER_TASKS, "analysis": ("analysis",)}
LABELS = {"STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R", "SST2": "SST-2"}
_ALIASES = {"sts-b": "STSBenchmark", "stsb": "STSBenchmark", "stsbenchmark": "STSBenchmark",
            "sick-r": "SICKRelatedness", "sickr": "SICKRelatedness", "sick": "SICKRelatedness",
            "sickrelatedness": "SICKRelatedness", "sst": "SST2", "sst-2": "SST2", "sst2": "SST2"}
KFOLD = {"test": 10, "fasttest": 5}


def label(task: str) -> str:
    return LABELS.get(task, task)


def expand_tasks(tasks: str | Iterable[str]) -> list[str]:
    """'all' | group names | task names (comma-separated or a sequence) -> task names in canonical order."""
    if isinstance(tasks, str):
        tasks = tasks.split(",")
    wanted: set[str] = set()
    canon = {t.lower(): t for t in ALL_TASKS}
    for raw in tasks:
        key = raw.strip().lower()
        if not key:
            continue
        if key == "all":
            wanted.update(ALL_TASKS)
        elif key in GROUPS:
            wanted.update(GROUPS[key])
        elif key in canon or key in _ALIASES:
            wanted.add(canon.get(key) or _ALIASES[key])
        elif key in OWN_DATA:
            wanted.add(key)
        else:
            raise ValueError(f"unknown task {raw.strip()!r}; choose from all, sts, transfer, analysis, retrieval, "
                             f"pairs, {', '.join(ALL_TASKS[:-1])}")
    if not wanted:
        raise ValueError("no tasks given")
    return [t for t in ALL_TASKS + OWN_DATA if t in wanted]


def _sts(task: str, a: dict) -> Evaluator:
    from mixcse.evaluation.sts import STSEvaluator

    return STSEvaluator.senteval(task, a["data_dir"])


def _transfer(task: str, a: dict) -> Evaluator:
    from mixcse.evaluation.transfer import TransferEvaluator

    return TransferEvaluator(task, a["data_dir"], a["classifier"], KFOLD[a["mode"]])


def _analysis(task: str, a: dict) -> Evaluator:
    from mixcse.evaluation.analysis import AnalysisEvaluator

    return AnalysisEvaluator(a["data_dir"])


def _retrieval(task: str, a: dict) -> Evaluator:
    from mixcse.evaluation.retrieval import RetrievalEvaluator

    return RetrievalEvaluator(a["retrieval_data"], a["retrieval_split"], max_seq_length=a["max_seq_length"])


def _pairs(task: str, a: dict) -> Evaluator:
    from mixcse.evaluation.pairs import PairsEvaluator

    return PairsEvaluator(a["pairs_data"], name="pairs")


# task -> (what it needs: "senteval" = the SentEval folder, else the argument naming the user's data, factory)
EVALUATORS: dict[str, tuple[str, Callable[[str, dict], Evaluator]]] = {
    **{t: ("senteval", _sts) for t in STS_TASKS},
    **{t: ("senteval", _transfer) for t in TRANSFER_TASKS},
    "analysis": ("senteval", _analysis),
    "retrieval": ("retrieval_data", _retrieval),
    "pairs": ("pairs_data", _pairs),
}


def needs_senteval(names: Iterable[str]) -> bool:
    return any(EVALUATORS[t][0] == "senteval" for t in names)


def build_evaluators(names: list[str], **arguments) -> list[Evaluator]:
    """One evaluator per task name (``expand_tasks``' output), each reading its data now. ``arguments``:
    data_dir (the SentEval folder), classifier (a probe), mode, retrieval_data, retrieval_split, max_seq_length,
    pairs_data."""
    return [EVALUATORS[t][1](t, arguments) for t in names]
