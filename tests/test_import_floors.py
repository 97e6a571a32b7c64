"""Imports go one way: evaluation never imports training (config, trainer, step, run folder, corpus)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mixcse"
TRAINING = {"config", "trainer", "step", "rundir", "data", "shards", "distributed", "tracking", "fast_dropout",
            "documents"}


def imported_modules(path: Path) -> set[str]:
    """The mixcse modules a file imports, as top-level names under mixcse (e.g. "config", "evaluation")."""
    package = path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[:len(package) - node.level + 1])
                target = base + (node.module.split(".") if node.module else [])
            else:
                target = (node.module or "").split(".")
            if target[:1] == ["mixcse"] and len(target) > 1:
                found.add(target[1])
            elif target == ["mixcse"]:  # "from .. import x" at the top: x is the module
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("mixcse."))
    return found


def test_the_walker_sees_relative_and_absolute_imports(tmp_path):
    probe = PACKAGE / "evaluation" / "selection.py"
    assert "evaluation" in imported_modules(probe)  # from . import data -> mixcse.evaluation
    assert "config" in imported_modules(PACKAGE / "trainer.py")


def test_evaluation_imports_nothing_from_training():
    for path in sorted((PACKAGE / "evaluation").glob("*.py")):
        upward = imported_modules(path) & TRAINING
        assert not upward, f"{path.name} imports training modules {sorted(upward)}"
