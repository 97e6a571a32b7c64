"""Golden losses: ten fp32 steps of ``mixcse.train`` on the tiny BERT must log exactly these numbers.

The resume tests only check that a run agrees with itself; a change to the training step that alters what is
computed (the views, the loss, the gradient, the update) would still pass them. These values pin the computation
itself. They were recorded on the default CPU path (numpy dropout masks) with one forward pass per batch
(``length_buckets=1``) and one thread. A deliberate change to the step must update them, and say why.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import mixcse

pytestmark = pytest.mark.numeric  # rerun on other arithmetic paths (docs/development.md)

# Per loss: the loss and anchor_grad_norm logged at steps 1..10, and a fingerprint of the final weights.
GOLDEN = json.loads((Path(__file__).parent / "fixtures" / "golden_steps.json").read_text())


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def run_ten_steps(tiny_bert, synthetic_data, out, loss: str) -> tuple[list[dict], float]:
    mixcse.train({"model": str(tiny_bert), "train_file": str(synthetic_data["corpus"]), "output_dir": str(out),
                  "select_on": "none", "loss": loss, "batch_size": 16,
                  "max_steps": 10, "eval_steps": 10, "log_steps": 1, "learning_rate": 1e-4,
                  "max_seq_length": 16, "seed": 7, "precision": "fp32", "length_buckets": 1, "num_threads": 1})
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    state = torch.load(out / "checkpoint/state.pt", weights_only=False)["model"]
    # A weighted sum over every parameter: any change to any weight moves it.
    fingerprint = sum(float((t.double().flatten() * torch.linspace(-1, 1, t.numel(), dtype=torch.float64)).sum())
                      for _, t in sorted(state.items()) if t.is_floating_point())
    return [r for r in records if "loss" in r], fingerprint


@pytest.mark.parametrize("loss", ["simcse", "mixcse"])
def test_ten_fp32_steps_log_the_golden_losses(tiny_bert, synthetic_data, tmp_path, one_thread, loss):
    records, fingerprint = run_ten_steps(tiny_bert, synthetic_data, tmp_path / loss, loss)
    assert [r["step"] for r in records] == list(range(1, 11))
    expected = GOLDEN[loss]
    assert [r["loss"] for r in records] == pytest.approx(expected["loss"], rel=1e-6)
    assert [r["anchor_grad_norm"] for r in records] == pytest.approx(expected["anchor_grad_norm"], rel=1e-5)
    assert fingerprint == pytest.approx(expected["fingerprint"], rel=1e-6)
