"""What a fresh machine relies on: the README's two set-up commands, and no test skipped for a missing package."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import skip_is_a_missing_module

REPO = Path(__file__).resolve().parents[1]


def _skip_reason(module: str) -> str:
    with pytest.raises(pytest.skip.Exception) as info:
        pytest.importorskip(module)
    return str(info.value)


def test_a_skip_for_a_missing_module_is_recognised():
    assert skip_is_a_missing_module(_skip_reason("mixcse_no_such_module"))
    assert not skip_is_a_missing_module("no CUDA device")
    assert not skip_is_a_missing_module("the shared SciFact copy is not here")


def test_the_skip_guard_turns_such_a_skip_into_a_failure(tmp_path):
    (tmp_path / "conftest.py").write_text((REPO / "conftest.py").read_text())
    (tmp_path / "test_x.py").write_text("import pytest\n\ndef test_a():\n    pytest.importorskip('mixcse_nope')\n\n"
                                        "def test_b():\n    pytest.skip('no GPU')\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 1, done.stdout
    assert "1 failed, 1 skipped" in done.stdout


def test_ci_runs_exactly_the_readmes_two_set_up_commands():
    run = (REPO / ".ci" / "run").read_text()
    main = re.search(r"^MAIN_COMMAND='(.*)'$", run, re.M).group(1)
    test = re.search(r"^TEST_COMMAND='(.*)'$", run, re.M).group(1)
    assert test == 'pip install -e ".[test]" && python -m pytest -q'
    assert 'eval "$TEST_COMMAND"' in run and 'eval "$MAIN_COMMAND"' in run

    def check(*commands):
        return subprocess.run([sys.executable, str(REPO / ".ci" / "readme_commands.py"), "check", *commands],
                              capture_output=True, text=True).returncode

    assert check(main, test) == 0
    assert check(test, main) == 1  # order matters: the main job first
    recipe = main.split("mixcse train ", 1)[1].split()[0]
    assert (REPO / recipe).is_file()
