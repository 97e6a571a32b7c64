"""The task registry: every task ``mixcse eval --tasks`` knows, in the paper's order, and the evaluator that scores it.

    STS_TASKS, TRANSFER_TASKS, ALL_TASKS    task names in the order of the paper's tables ("all" = these + analysis)
    OWN_DATA                                tasks that need the user's files and are not part of "all"
    label(task)                             the column label ("STSBenchmark" -> "STS-B")
    expand_tasks("sts,MR,pairs")            names, groups and aliases -> task names in canonical order
    build_evaluators(names, ...)            -> one ``Evaluator`` per task (the pairs task: one for all its files)
    check_task_data(names, data)            the tasks that need the user's files have them, and no file is unused
    register_task(name, factory, family)    a new task: ``mixcse eval --tasks NAME`` runs it
    family(section), families(results)      the evaluator class that renders a results section (evaluator.py)

Adding a task means one evaluator class (it renders its own results: evaluator.py) and one ``register_task`` call;
the runner's tables and settings and the model card loop over the families.
"""
from __future__ import annotations

from typing import Callable, Iterable

from mixcse.errors import DataError
from mixcse.evaluation.evaluator import Evaluator
from mixcse.evaluation.evaluator import label as label

STS_TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
ALL_TASKS = STS_TASKS + TRANSFER_TASKS + ("analysis",)
OWN_DATA = ("retrieval", "pairs")  # not part of "all": they need the user's own files
GROUPS = {"sts": STS_TASKS, "transfer": TRANSFER_TASKS, "analysis": ("analysis",)}
_ALIASES = {"sts-b": "STSBenchmark", "stsb": "STSBenchmark", "stsbenchmark": "STSBenchmark",
            "sick-r": "SICKRelatedness", "sickr": "SICKRelatedness", "sick": "SICKRelatedness",
            "sickrelatedness": "SICKRelatedness", "sst": "SST2", "sst-2": "SST2", "sst2": "SST2"}
KFOLD = {"test": 10, "fasttest": 5}


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
        elif key in OWN_DATA or key in REGISTERED:
            wanted.add(key)
        else:
            raise ValueError(f"unknown task {raw.strip()!r}; choose from all, sts, transfer, analysis, retrieval, "
                             f"pairs, {', '.join(ALL_TASKS[:-1] + tuple(REGISTERED))}")
    if not wanted:
        raise ValueError("no tasks given")
    return [t for t in ALL_TASKS + OWN_DATA + tuple(REGISTERED) if t in wanted]


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

    return PairsEvaluator(a["pairs_data"], name="pairs", threshold_from=a.get("threshold_from"))


# task -> (what it needs: "senteval" = the SentEval folder, the argument naming the user's data, or None; factory)
EVALUATORS: dict[str, tuple[str | None, Callable[[str, dict], Evaluator]]] = {
    **{t: ("senteval", _sts) for t in STS_TASKS},
    **{t: ("senteval", _transfer) for t in TRANSFER_TASKS},
    "analysis": ("senteval", _analysis),
    "retrieval": ("retrieval_data", _retrieval),
    "pairs": ("pairs_data", _pairs),
}


# the user's data arguments: (what it is, the flag of `mixcse eval`)
DATA_ARGUMENTS = {"retrieval_data": ("a BEIR folder", "--retrieval-data DIR"),
                  "pairs_data": ("labelled pair files", "--pairs-data FILE ...")}
REGISTERED: dict[str, str] = {}  # task added by register_task -> its results section, in order


def _family_sts() -> type[Evaluator]:
    from mixcse.evaluation.sts import STSEvaluator

    return STSEvaluator


def _family_transfer() -> type[Evaluator]:
    from mixcse.evaluation.transfer import TransferEvaluator

    return TransferEvaluator


def _family_analysis() -> type[Evaluator]:
    from mixcse.evaluation.analysis import AnalysisEvaluator

    return AnalysisEvaluator


def _family_retrieval() -> type[Evaluator]:
    from mixcse.evaluation.retrieval import RetrievalEvaluator

    return RetrievalEvaluator


def _family_pairs() -> type[Evaluator]:
    from mixcse.evaluation.pairs import PairsEvaluator

    return PairsEvaluator


# results section -> its evaluator class (loaded on first use), in the order tables and cards show them
FAMILIES: dict[str, Callable[[], type[Evaluator]]] = {
    "sts": _family_sts, "transfer": _family_transfer, "analysis": _family_analysis, "retrieval": _family_retrieval,
    "pairs": _family_pairs}
SENTEVAL_SECTIONS = ("sts", "transfer", "analysis")  # the protocol of "all": recorded in every run's settings
BUILT_IN_SECTIONS = tuple(FAMILIES)
RESERVED_SECTIONS = ("settings", "tasks", "mode", "seconds")  # keys of the results dict that are no section


def register_task(name: str, factory: Callable[[str, dict], Evaluator], family: type[Evaluator], *,
                  needs: str | None = None) -> None:
    """A task ``mixcse eval --tasks NAME`` runs (never part of "all"): ``factory(name, arguments)`` builds its
    evaluator (``arguments``: those of ``build_evaluators``), ``family`` is its evaluator class, which files its
    results under ``family.section`` and renders them. ``needs``: "senteval", a key of ``DATA_ARGUMENTS``, or None."""
    taken = {"all", *GROUPS, *_ALIASES, *(t.lower() for t in ALL_TASKS + OWN_DATA)}
    if name.lower() != name or not name or name in taken:
        raise ValueError(f"task {name!r}: a task name is lower case and not a built-in task's, group's or alias's")
    owner = FAMILIES.get(family.section)
    if family.section in RESERVED_SECTIONS or owner is not None and owner() is not family:
        raise ValueError(f"task {name!r}: the results section {family.section!r} belongs to another family")
    if not family.section:
        raise ValueError(f"{family.__name__} names no results section")
    if needs not in (None, "senteval", *DATA_ARGUMENTS):
        raise ValueError(f"needs must be None, senteval or one of {', '.join(DATA_ARGUMENTS)}")
    EVALUATORS[name] = (needs, factory)
    REGISTERED[name] = family.section
    FAMILIES.setdefault(family.section, lambda: family)


def unregister_task(name: str) -> None:
    """Take a task ``register_task`` added out again (and its section, when no built-in family renders it)."""
    if name not in REGISTERED:
        return
    section = REGISTERED.pop(name)
    del EVALUATORS[name]
    if section not in BUILT_IN_SECTIONS and section not in REGISTERED.values():
        del FAMILIES[section]


def family(section: str) -> type[Evaluator] | None:
    """The evaluator class that renders results section ``section``; None for a section no family claims."""
    loader = FAMILIES.get(section)
    return loader() if loader is not None else None


def families(results: dict) -> list[type[Evaluator]]:
    """The families of the sections ``results`` holds, in display order."""
    return [family(section) for section in FAMILIES if isinstance(results.get(section), dict) and results[section]]


def check_task_data(names: Iterable[str], data: dict, *, unused: bool = True) -> None:
    """DataError when a task of ``names`` needs a data argument of ``data`` ({argument: value}) that is not given,
    or (``unused``) when a given one serves no task."""
    names = list(names)
    for task in names:
        need = EVALUATORS[task][0]
        if need in DATA_ARGUMENTS and not data.get(need):
            raise DataError(f"--tasks {task} needs {DATA_ARGUMENTS[need][1]} ({DATA_ARGUMENTS[need][0]})")
    for argument, value in data.items():
        if unused and value is not None and not any(EVALUATORS[t][0] == argument for t in names):
            task = next(t for t, (need, _) in EVALUATORS.items() if need == argument)
            raise DataError(f"{DATA_ARGUMENTS[argument][1].split()[0]} needs {task} in --tasks (e.g. --tasks {task})")


def needs_senteval(names: Iterable[str]) -> bool:
    return any(EVALUATORS[t][0] == "senteval" for t in names)


def build_evaluators(names: list[str], **arguments) -> list[Evaluator]:
    """One evaluator per task name (``expand_tasks``' output), each reading its data now. ``arguments``:
    data_dir (the SentEval folder), classifier (a probe), mode, retrieval_data, retrieval_split, max_seq_length,
    pairs_data, threshold_from (a dev pair file: the pairs task's F1 at the threshold best there)."""
    return [EVALUATORS[t][1](t, arguments) for t in names]
