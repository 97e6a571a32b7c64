"""Imports go one way, floor by floor, and never in a circle (docs/development.md has the map).

    0  mixcse.errors, mixcse.utils       files, JSON, tables, progress
    1  mixcse.data                       reading text, the corpora
    2  mixcse.losses, mixcse.models      the objectives; the model and its inference
    3  mixcse.evaluation                 evaluators, the runner, selection, the model card; knows nothing of training
    4  mixcse.integrations               sentence-transformers
    5  mixcse.training                   config, trainer, step, run folder
    6  mixcse.cli                        one module per verb

A module may import its own floor or lower ones. Every import counts, also one inside a function.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mixcse"
FLOORS = {"errors": 0, "utils": 0, "data": 1, "losses": 2, "models": 2, "evaluation": 3, "integrations": 4,
          "training": 5, "cli": 6, "__main__": 6}


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path) -> dict[str, set[str]]:
    """{module: the package's modules it imports}; ``from pkg import name`` points at ``pkg.name`` when that is a
    module, else at ``pkg``."""
    files = {module_name(p, package): p for p in package.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        here = name.split(".") if is_package else name.split(".")[:-1]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = here[:len(here) - node.level + 1] if node.level else []
                module = ".".join(base + (node.module.split(".") if node.module else []))
                for alias in node.names:
                    targets.add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in files else module)
            elif isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def floor(module: str, floors: dict[str, int]) -> int | None:
    parts = module.split(".")
    return floors.get(parts[1]) if len(parts) > 1 else None  # the top package's lazy exports have no floor


def check_floors(package: Path, floors: dict[str, int]) -> list[str]:
    """Every upward import and every circle, as lines; empty when the package keeps its floors."""
    graph = import_graph(package)
    problems = [f"{module} has no floor" for module in graph if floor(module, floors) is None and "." in module]
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            low, high = floor(module, floors), floor(target, floors)
            if low is not None and high is not None and high > low:
                problems.append(f"{module} (floor {low}) imports {target} (floor {high})")
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        problems.append("import circle: " + " -> ".join(exc.args[1]))
    return problems


def test_the_package_keeps_its_floors_and_has_no_circle():
    assert check_floors(PACKAGE, FLOORS) == []


def test_every_folder_says_what_lives_there_and_what_it_may_import():
    for init in PACKAGE.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        where = init.relative_to(PACKAGE.parent)
        assert "may import" in doc.lower(), f"{where}: the docstring does not say what it may import"


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root / "pkg"


@pytest.mark.parametrize("files, expected", [
    ({"pkg/__init__.py": "", "pkg/low/__init__.py": "", "pkg/low/a.py": "from pkg.high import b\n",
      "pkg/high/__init__.py": "", "pkg/high/b.py": ""}, "pkg.low.a (floor 0) imports pkg.high.b (floor 1)"),
    ({"pkg/__init__.py": "", "pkg/low/__init__.py": "", "pkg/low/a.py": "def f():\n    from ..high import b\n",
      "pkg/high/__init__.py": "", "pkg/high/b.py": ""}, "pkg.low.a (floor 0) imports pkg.high.b (floor 1)"),
    ({"pkg/__init__.py": "", "pkg/low/__init__.py": "", "pkg/low/a.py": "from . import c\n",
      "pkg/low/c.py": "from pkg.low.a import x\n"}, "import circle"),
])
def test_the_check_finds_an_upward_import_and_a_circle_also_inside_a_function(tmp_path, files, expected):
    package = write(tmp_path, files)
    problems = check_floors(package, {"low": 0, "high": 1})
    assert any(expected in p for p in problems), problems
    clean = write(tmp_path / "clean", {"pkg/__init__.py": "", "pkg/low/__init__.py": "", "pkg/low/a.py": "x = 1\n",
                                       "pkg/high/__init__.py": "", "pkg/high/b.py": "from pkg.low import a\n"})
    assert check_floors(clean, {"low": 0, "high": 1}) == []


@pytest.mark.parametrize("package", ["mixcse", "mixcse.evaluation", "mixcse.integrations"])
def test_every_lazy_export_resolves(package):
    import importlib

    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if getattr(module, name, None) is None]
    assert module.__all__ and missing == []
