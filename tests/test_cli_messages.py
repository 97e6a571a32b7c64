"""The line `mixcse train` prints after its result: what the dev number means, and what to run next."""

from types import SimpleNamespace

from mixcse.cli.train import _next_step


def _result(raw, best, best_step, metric="stsb_dev"):
    return SimpleNamespace(raw_dev=raw, best_dev=best, best_step=best_step, select_metric=metric, output_dir="runs/x")


def test_the_start_model_kept_explains_the_number_and_points_to_domain_adaptation():
    line = _next_step(_result(29.75, 29.75, 0))
    assert line.startswith("note: ") and "start model" in line and "docs/domain-adaptation.md" in line
    assert "\n" not in line and "STS-B dev" in line
    line = _next_step(_result(78.9, 78.9, 0, "train_ndcg@10"))
    assert line.startswith("note: ") and "train_ndcg@10" in line and "docs/domain-adaptation.md" in line


def test_a_gain_or_no_selection_gives_the_next_command():
    for result in (_result(29.75, 31.0, 250), _result(None, None, 250, None)):
        line = _next_step(result)
        assert line.startswith("next: mixcse eval runs/x/best") and "\n" not in line
