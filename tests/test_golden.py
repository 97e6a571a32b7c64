"""Golden losses: ten fp32 steps of ``mixcse.train`` on the tiny BERT must log exactly these numbers.

The resume tests only check that a run agrees with itself; a change to the training step that alters what is
computed (the views, the loss, the gradient, the update) would still pass them. These values pin the computation
itself. They were recorded on the default CPU path (numpy dropout masks) with one forward pass per batch
(``length_buckets=1``) and one thread. A deliberate change to the step must update them, and say why.
"""

from __future__ import annotations

import json

import pytest
import torch

import mixcse

# (loss, anchor_grad_norm) logged at steps 1..10, and a fingerprint of the final weights.
GOLDEN = {
    "simcse": {
        "loss": [
            3.1604254245758057, 3.185439109802246, 3.037977933883667, 3.076218843460083, 3.248647451400757,
            2.9361157417297363, 3.0188417434692383, 2.9933714866638184, 2.8806309700012207, 2.908658981323242,
        ],
        "anchor_grad_norm": [
            1.7029869556427002, 1.5750676393508911, 1.6034128665924072, 1.6905263662338257, 1.4218987226486206,
            1.6400727033615112, 1.505284309387207, 1.294247031211853, 1.3009008169174194, 1.3755555152893066,
        ],
        "fingerprint": 2.7622411378149367,
    },
    "mixcse": {
        "loss": [
            3.9020023345947266, 3.9402353763580322, 3.8140792846679688, 3.8731720447540283, 3.88958740234375,
            3.7636919021606445, 3.7299089431762695, 3.6761093139648438, 3.636718273162842, 3.6921987533569336,
        ],
        "anchor_grad_norm": [
            1.6708095073699951, 1.544191837310791, 1.5836997032165527, 1.6674129962921143, 1.3959739208221436,
            1.59608793258667, 1.4409024715423584, 1.2409100532531738, 1.2565115690231323, 1.3482093811035156,
        ],
        "fingerprint": 2.75287015537174,
    },
}


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def run_ten_steps(tiny_bert, synthetic_data, out, loss: str) -> tuple[list[dict], float]:
    no_dev_data = out.parent / "no-dev-data"  # no evaluation: the numbers are those of the training step alone
    no_dev_data.mkdir(parents=True, exist_ok=True)
    mixcse.train({"model": str(tiny_bert), "train_file": str(synthetic_data["corpus"]), "output_dir": str(out),
                  "data_dir": str(no_dev_data), "eval_at_start": False, "loss": loss, "batch_size": 16,
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
