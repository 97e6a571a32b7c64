"""Every generated block of README.md and docs/ from the committed results JSON.

    python -m benchmarks.report            # rewrite every block in its page
    python -m benchmarks.report --check    # rewrite nothing; exit 1 naming each block that differs

A module of MODULES that owns blocks defines ``BLOCKS = {name: (page, render)}``: ``page`` relative to the
repository, ``render()`` the block's markdown from committed JSON only. In the page the block sits between the two
lines of common.block_markers(name); a page's marker that no module renders is an error, as is a missing one."""

from __future__ import annotations

import argparse
import difflib
import importlib
import re
import sys
from pathlib import Path

from benchmarks.common import REPO, block_markers

MODULES = ("benchmarks.claims_report", "benchmarks.speed", "benchmarks.domain")
BEGIN = re.compile(r"<!-- begin generated:([\w.-]+) \(python -m benchmarks\.report\) -->")


def registered(modules=MODULES) -> dict[str, tuple[str, object]]:
    """name -> (page, render) over ``modules`` (one without BLOCKS, or not there, gives none)."""
    out: dict[str, tuple[str, object]] = {}
    for module in modules:
        try:
            blocks = getattr(importlib.import_module(module), "BLOCKS", {})
        except ModuleNotFoundError as e:
            if e.name != module:  # a module not there renders nothing; one whose import fails is an error
                raise
            continue
        if twice := set(blocks) & set(out):
            raise ValueError(f"generated block {sorted(twice)[0]!r} is registered twice")
        out |= blocks
    return out


def replace_block(text: str, name: str, body: str) -> str:
    """``text`` with the block ``name`` holding ``body``; ValueError when its markers are not there, in order."""
    begin, end = block_markers(name)
    head, found, rest = text.partition(begin + "\n")
    old, closed, tail = rest.partition(end)
    if not (found and closed):
        raise ValueError(f"no lines {begin!r} ... {end!r}")
    return f"{head}{begin}\n{body.strip()}\n{end}{tail}"


def regenerate(blocks: dict, repo: Path = REPO) -> tuple[dict[Path, str], list[str], list[str]]:
    """(page -> its text with every block rendered, the blocks whose text changed, problems: a block without its
    markers, a marker no module renders)."""
    pages: dict[Path, str] = {}
    changed, problems = [], []
    for name, (page, render) in blocks.items():
        path = repo / page
        try:
            old = pages.get(path) or path.read_text(encoding="utf-8")
            pages[path] = replace_block(old, name, render())
        except (OSError, ValueError) as e:
            problems.append(f"{name} ({page}): {e}")
            continue
        if pages[path] != old:
            changed.append(f"{name} ({page})")
    for path in [repo / "README.md", *sorted((repo / "docs").rglob("*.md"))]:
        for name in BEGIN.findall(path.read_text(encoding="utf-8")):
            if name not in blocks:
                problems.append(f"{name} ({path.relative_to(repo)}): no module of {', '.join(MODULES)} renders it")
    return pages, changed, problems


def main(argv=None, blocks: dict | None = None, repo: Path = REPO) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.report", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 naming the blocks that differ")
    args = ap.parse_args(argv)
    pages, changed, problems = regenerate(registered() if blocks is None else blocks, repo)
    for path, text in pages.items():
        old = path.read_text(encoding="utf-8")
        if old != text and args.check:
            diff = list(difflib.unified_diff(old.splitlines(), text.splitlines(), lineterm="", n=0))
            print(f"{path.relative_to(repo)}:\n" + "\n".join(diff[2:22]))
        elif old != text:
            path.write_text(text, encoding="utf-8")
    print("\n".join([f"{'differs' if args.check else 'rewrote'}: {c}" for c in changed] + problems), file=sys.stderr)
    return 1 if problems or (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
