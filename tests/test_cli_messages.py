"""The line `mixcse train` prints after its result: what the dev number means, and what to run next."""

from types import SimpleNamespace

from mixcse.cli.train import _next_step


def _result(raw, best, best_step, metric="stsb_dev", label=None, hint=None):
    return SimpleNamespace(raw_dev=raw, best_dev=best, best_step=best_step, select_metric=metric, output_dir="runs/x",
                           select_label=label, start_won_hint=hint)


def test_the_start_model_kept_explains_the_number_and_points_to_domain_adaptation(synthetic_data):
    from mixcse.evaluation.selection import build_selector

    selector, _ = build_selector("stsb_dev", data_dir=str(synthetic_data["data_dir"]), select_data=None,
                                 select_split="train")  # the run's summary carries its label and hint
    line = _next_step(_result(29.75, 29.75, 0, label=selector.label, hint=selector.start_won_hint))
    assert line.startswith("note: ") and "start model" in line and "docs/domain-adaptation.md" in line
    assert "\n" not in line and "on STS-B dev, so" in line and "general-domain similarity" in line
    line = _next_step(_result(78.9, 78.9, 0, "train_ndcg@10"))
    assert line.startswith("note: ") and "train_ndcg@10" in line and "docs/domain-adaptation.md" in line


def test_a_gain_or_no_selection_gives_the_next_command():
    for result in (_result(29.75, 31.0, 250), _result(None, None, 250, None)):
        line = _next_step(result)
        assert line.startswith("next: mixcse eval runs/x/best") and "\n" not in line
