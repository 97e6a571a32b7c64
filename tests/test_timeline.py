"""Where a run's time goes (summary.json "seconds") and the training bar's ETA, on a fake clock and on a real run."""
from __future__ import annotations

import io
import json

import pytest

import mixcse
from mixcse.training.timeline import PHASES, Timeline
from mixcse.utils.progress import Progress


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_the_first_eta_counts_the_steps_and_the_evaluations_to_come_not_the_start_models_scoring():
    """60 s of start-model scoring (dev pairs 20 s, guard 10 s, test pairs 30 s), then 1 s steps: 100 steps with an
    evaluation every 25 (each scoring the dev pairs and the guard), and the test pairs again at the end. After the
    first step the ETA is the work left, within 10 % -- not 60 s/step."""
    clock = FakeClock()
    timeline = Timeline(clock)
    for phase, seconds in (("select", 20), ("guard", 10), ("test", 30)):  # the start model
        with timeline.phase(phase):
            clock.advance(seconds)
    total, every = 100, 25
    stream = io.StringIO()
    step = 0

    def eta():
        evals = sum(s % every == 0 for s in range(step + 1, total + 1))
        return timeline.eta(steps_left=total - step, scorings_left=evals, tests_left=1)

    bar = Progress(total, "train", "steps", stream=stream, tty=False, every_seconds=0, eta=eta, clock=clock)
    with timeline.phase("train"):
        clock.advance(1.0)
        step = 1
        bar.update(1)
    left = 99 * 1.0 + 4 * (20 + 10) + 30  # what the fake run will take from here
    line = stream.getvalue().splitlines()[0]
    assert line.startswith("train: 1/100 steps (1%)") and "1.0 steps/s" in line, line
    assert abs(eta() - left) <= 0.1 * left
    minutes, seconds = divmod(round(eta()), 60)
    assert f"ETA {minutes}m{seconds:02d}s" in line


def test_a_phase_inside_another_pauses_it_and_nothing_is_counted_twice():
    clock = FakeClock()
    timeline = Timeline(clock)
    with timeline.phase("train"):
        clock.advance(2)
        with timeline.phase("other"):
            clock.advance(3)
        clock.advance(1)
    clock.advance(0.5)  # between phases: unaccounted
    assert timeline.seconds == {"train": 3.0, "select": 0.0, "guard": 0.0, "test": 0.0, "other": 3.0}
    assert timeline.wall() == 6.5 and timeline.eta(steps_left=4, scorings_left=2, tests_left=0) == 12.0
    with pytest.raises(ValueError, match="unknown phase"):
        with timeline.phase("lunch"):
            pass


@pytest.mark.parametrize("resume", [False, True])
def test_summary_says_where_the_wall_time_went(tiny_bert, synthetic_data, tmp_path, capsys, resume):
    """summary.json's "seconds" has every phase and adds up to wall_seconds within 5 %, also for a resumed call."""
    out, dev = tmp_path / "run", tmp_path / "dev.tsv"
    dev.write_text("sentence1\tsentence2\tlabel\nt0w1 t0w2\tt0w3 t0w4\t1\nt0w1 t0w2\tt7w1 t7w2\t0\n"
                   "t3w1 t3w5\tt3w2 t3w4\t1\nt3w1\tt5w5\t0\n")
    config = {"model": str(tiny_bert), "train_file": str(synthetic_data["corpus"]), "output_dir": str(out),
              "batch_size": 16, "max_seq_length": 16, "max_steps": 6, "eval_steps": 3, "learning_rate": 1e-4,
              "select_on": "pairs", "select_data": str(dev),
              "test_pairs": [str(dev)], "precision": "fp32", "seed": 0}
    if resume:
        mixcse.train({**config, "max_steps": 3}, progress=False)
        capsys.readouterr()
    result = mixcse.train(config, resume=resume, progress=False)
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["seconds"]) == set(PHASES) and result.seconds == summary["seconds"]
    assert all(v >= 0 for v in summary["seconds"].values())
    assert summary["seconds"]["train"] > 0  # scoring 4 pairs takes ~0.0 s
    assert sum(summary["seconds"].values()) == pytest.approx(summary["wall_seconds"], rel=0.05)
    printed = capsys.readouterr().out
    assert "time: " in printed and f"{summary['wall_seconds']:.0f}s wall" in printed
    assert ("start model scored in select" in printed) is not resume
