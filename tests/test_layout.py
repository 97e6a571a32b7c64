"""The checkout keeps the shape docs/development.md describes: short functions, a short training loop, and a
benchmark package that stands apart from the tests (no ``sys.path`` edits, no imports either way)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LONG_FUNCTION = 100  # lines of code, the docstring not counted
# Benchmark code stays small beside the library: 2,400 lines, raised only by a commit that adds a benchmark (its
# message says why), never above BENCHMARK_CAP; code is never joined or squeezed to fit (test below).
# raised from 2,400 to 2,600 by the label-budget benchmark, to 2,800 by the tuning, rescore and second-model rows
BENCHMARK_LINES = 2800
BENCHMARK_CAP = 3000
LINE_LENGTH = 120


def code_lines(node: ast.FunctionDef) -> int:
    lines = node.end_lineno - node.lineno + 1
    doc = node.body[0] if node.body and isinstance(node.body[0], ast.Expr) else None
    if doc is not None and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str):
        lines -= doc.end_lineno - doc.lineno + 1
    return lines


def functions(root: Path):
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path, node


def long_functions(root: Path, limit: int = LONG_FUNCTION) -> list[str]:
    """Functions over ``limit`` lines of code whose ``def`` line does not say why (a ``# long:`` comment)."""
    found = []
    for path, node in functions(root):
        if code_lines(node) > limit and "# long:" not in path.read_text().splitlines()[node.lineno - 1]:
            found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({code_lines(node)} lines)")
    return found


def imported_top_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_function_of_the_package_is_long_without_saying_why():
    assert long_functions(REPO / "mixcse") == []


def test_the_training_loop_reads_in_one_screen():
    from mixcse.training import trainer

    tree = ast.parse(Path(trainer.__file__).read_text())
    run = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Run")
    loops = [n for n in run.body if isinstance(n, ast.FunctionDef) and n.name == "train"]
    top = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "train"]
    assert loops and top and all(code_lines(n) <= 80 for n in loops + top)


def test_the_length_check_counts_code_and_honours_a_reason(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(LONG_FUNCTION + 1))
    doc = '    """' + "\n".join("words" for _ in range(50)) + '"""\n'
    (pkg / "a.py").write_text(f"def long():\n{body}\n\n\ndef documented():\n{doc}    return 1\n")
    (pkg / "b.py").write_text(f"def long_with_reason():  # long: one table, read top to bottom\n{body}\n")
    assert [line.split()[1] for line in long_functions(pkg)] == ["long"]


@pytest.mark.parametrize("folder, other", [("tests", "benchmarks"), ("benchmarks", "tests")])
def test_tests_and_benchmarks_do_not_import_each_other(folder, other):
    bad = [str(p.relative_to(REPO)) for p in (REPO / folder).rglob("*.py") if other in imported_top_names(p)]
    assert bad == []


def test_nothing_edits_sys_path():
    files = [*REPO.glob("*.py"), *(REPO / "benchmarks").rglob("*.py"), *(REPO / "tests").rglob("*.py"),
             *(REPO / "mixcse").rglob("*.py")]
    assert [str(p.relative_to(REPO)) for p in files if "sys.path." in p.read_text()
            and p != Path(__file__).resolve()] == []


def test_the_benchmarks_stay_small():
    code = [p for p in (REPO / "benchmarks").rglob("*.py") if "tests" not in p.relative_to(REPO / "benchmarks").parts]
    total = sum(len(p.read_text().splitlines()) for p in code)
    assert total <= BENCHMARK_LINES <= BENCHMARK_CAP, f"benchmarks/ has {total} lines of Python (at most " \
                                                      f"{BENCHMARK_LINES}, a ceiling never above {BENCHMARK_CAP})"


def squeezed_lines(root: Path) -> list[str]:
    """Lines that hold two statements (``a = 1; b = 2``, ``if x: y``) or run past LINE_LENGTH characters."""
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        lines = [node.lineno for node in ast.walk(ast.parse(text)) if isinstance(node, ast.stmt)]
        starts = {n for n in lines if lines.count(n) > 1}
        compound = {node.body[0].lineno for node in ast.walk(ast.parse(text))
                    if isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.FunctionDef, ast.Try))
                    and node.body and node.body[0].lineno == node.lineno}
        for n in sorted(starts | compound):
            found.append(f"{path.relative_to(root.parent)}:{n} two statements on one line")
        found += [f"{path.relative_to(root.parent)}:{i} {len(line)} characters" for i, line in
                  enumerate(text.splitlines(), 1) if len(line) > LINE_LENGTH]
    return found


def test_benchmark_code_is_not_squeezed_to_fit_its_ceiling():
    assert squeezed_lines(REPO / "benchmarks") == []


def test_the_squeeze_check_finds_joined_statements_and_long_lines(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("x = 1; y = 2\nif x: y = 3\nz = '" + "w" * LINE_LENGTH + "'\nok = [1,\n      2]\n")
    assert [line.split(" ", 1)[1] for line in squeezed_lines(pkg)] == [
        "two statements on one line", "two statements on one line", f"{LINE_LENGTH + 6} characters"]
