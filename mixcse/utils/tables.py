"""How numbers are shown: ``number`` and ``markdown_table`` (the task order and labels live with the evaluators, in
``mixcse.evaluation.tasks``).

    number(value, digits=2)         "77.66"; "--" for a missing, non-numeric or non-finite value
    markdown_table(header, rows, centred=False) -> list of lines
"""

from __future__ import annotations

import math

def number(value, digits: int = 2) -> str:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "--"
    return f"{value:.{digits}f}"


def markdown_table(header: list[str], rows: list[list[str]], *, centred: bool = False) -> list[str]:
    """A header, a rule and one line per row. ``centred``: first column left-aligned, the others centred."""
    rule = [(":---:" if i else ":---") if centred else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rule) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]
