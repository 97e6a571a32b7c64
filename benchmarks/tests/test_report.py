"""The generated blocks (benchmarks/report.py): the committed pages are what the committed JSON renders; --check
names a stale block and writes nothing; a rewrite touches only the text between a block's markers; a block without
markers and a marker no module renders are errors; rendering needs no torch."""

from __future__ import annotations

import subprocess
import sys

from benchmarks import report
from benchmarks.common import REPO, block_markers


def test_the_committed_pages_are_what_the_committed_json_renders(capsys):
    assert report.main(["--check"]) == 0, capsys.readouterr()
    blocks = report.registered()
    assert {"readme-results", "claims-summary", "fp32-summary", "probe-gap", "archive-batch-size"} <= set(blocks)


def fake_repo(tmp_path, body: str = "old"):
    (tmp_path / "docs").mkdir()
    begin, end = block_markers("t")
    page = tmp_path / "docs" / "page.md"
    page.write_text(f"# page\nhand-written\n{begin}\n{body}\n{end}\nafter\n")
    (tmp_path / "README.md").write_text("# readme\n")
    return page, {"t": ("docs/page.md", lambda: "| new | table |")}


def test_check_names_a_stale_block_and_writes_nothing_then_a_rewrite_keeps_the_hand_written_text(tmp_path, capsys):
    page, blocks = fake_repo(tmp_path)
    before = page.read_text()
    assert report.main(["--check"], blocks, tmp_path) == 1
    out = capsys.readouterr()
    assert "differs: t (docs/page.md)" in out.err and "+| new | table |" in out.out and page.read_text() == before
    assert report.main([], blocks, tmp_path) == 0
    begin, end = block_markers("t")
    assert page.read_text() == f"# page\nhand-written\n{begin}\n| new | table |\n{end}\nafter\n"
    assert report.main(["--check"], blocks, tmp_path) == 0


def test_a_block_without_markers_and_a_marker_without_a_renderer_are_errors(tmp_path, capsys):
    page, blocks = fake_repo(tmp_path)
    assert report.main(["--check"], {"other": ("docs/page.md", lambda: "x")}, tmp_path) == 1
    err = capsys.readouterr().err
    assert "other (docs/page.md): no lines" in err and "t (docs/page.md): no module of" in err
    page.write_text("# page\nno markers\n")
    assert report.main([], blocks, tmp_path) == 1 and page.read_text() == "# page\nno markers\n"


def test_the_claims_tables_render_without_torch():
    code = ("import sys; from benchmarks import claims_report as c; "
            "[render() for page, render in c.BLOCKS.values()]; assert 'torch' not in sys.modules, 'torch imported'")
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
