"""The line `mixcse train` prints after its result: what the dev number means, and what to run next."""

from types import SimpleNamespace

from mixcse.cli import _next_step


def _result(raw, best):
    return SimpleNamespace(raw_dev=raw, best_dev=best, output_dir="runs/x")


def test_no_dev_gain_explains_the_number_and_points_to_domain_adaptation():
    line = _next_step(_result(29.75, 29.31))
    assert line.startswith("note: ") and "docs/domain-adaptation.md" in line and "\n" not in line
    assert _next_step(_result(30.0, 30.0)).startswith("note: ")


def test_a_dev_gain_or_no_dev_data_gives_the_next_command():
    for result in (_result(29.75, 31.0), _result(None, None)):
        line = _next_step(result)
        assert line.startswith("next: mixcse eval runs/x/best") and "\n" not in line
