"""How results are shown: the benchmark tasks in the paper's order, their display labels, numbers and markdown tables.

    STS_TASKS, TRANSFER_TASKS       task names in the order of the paper's tables
    label(task)                     the column label ("STSBenchmark" -> "STS-B")
    number(value, digits=2)         "77.66"; "--" for a missing, non-numeric or non-finite value
    markdown_table(header, rows, centred=False) -> list of lines

No dependency beyond the standard library: the model card and the trainer use it without the evaluation package.
"""

from __future__ import annotations

import math

STS_TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
LABELS = {"STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R", "SST2": "SST-2"}


def label(task: str) -> str:
    return LABELS.get(task, task)


def number(value, digits: int = 2) -> str:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "--"
    return f"{value:.{digits}f}"


def markdown_table(header: list[str], rows: list[list[str]], *, centred: bool = False) -> list[str]:
    """A header, a rule and one line per row. ``centred``: first column left-aligned, the others centred."""
    rule = [(":---:" if i else ":---") if centred else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rule) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]
