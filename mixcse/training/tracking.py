"""Experiment tracking: every record of metrics.jsonl also goes to TensorBoard and/or Weights & Biases.

    tracker = open_trackers(report_to, output_dir, resolved, start_step)   # report_to: "none", "tensorboard",
    tracker.log(record)                                                    # "wandb" or "tensorboard,wandb"
    tracker.close()

``record`` is a metrics.jsonl line: ``step`` plus named values. A training record (it has ``loss``) logs its finite
numbers as ``train/<name>``, an evaluation record as ``eval/<name>``; the resolved config is logged once as the
run's hyper-parameters. TensorBoard writes to ``output_dir/runs/`` (``tensorboard --logdir output_dir/runs``);
W&B to ``output_dir/wandb/`` in project ``$WANDB_PROJECT`` (default "mixcse"); ``WANDB_MODE=offline`` needs no
network (``wandb sync`` uploads later). A resumed run continues the same W&B run and drops TensorBoard events
logged after the checkpoint's step. Both libraries are optional extras: ``pip install 'mixcse[tensorboard]'`` /
``'mixcse[wandb]'``.
"""
from __future__ import annotations

import atexit
import json
import math
import os
import uuid
from pathlib import Path

from mixcse.errors import ConfigError

TRACKERS = ("none", "tensorboard", "wandb")
TENSORBOARD_DIR = "runs"
WANDB_DIR = "wandb"


def parse_report_to(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in TRACKERS]
    if unknown or not names:
        raise ConfigError(f"report_to must be none, tensorboard, wandb or a comma-separated list, got {value!r}")
    return [n for n in names if n != "none"]


def flat_config(resolved: dict, prefix: str = "") -> dict:
    """Nested config -> {"config.lr": 3e-05, ...} with scalar values only (what hyper-parameter tables take)."""
    out = {}
    for key, value in resolved.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_config(value, name + "."))
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            out[name] = json.dumps(value, default=str)
    return out


def _scalars(record: dict) -> tuple[int, dict[str, float]]:
    group = "train" if "loss" in record else "eval"
    values = {f"{group}/{k}": float(v) for k, v in record.items()
              if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
    return int(record["step"]), values


class _TensorBoard:
    def __init__(self, out: Path, resolved: dict, start_step: int):
        try:
            from torch.utils.tensorboard import SummaryWriter
            from torch.utils.tensorboard.summary import hparams
        except ImportError:
            raise ConfigError("report_to tensorboard needs tensorboard: pip install 'mixcse[tensorboard]'") from None
        self.writer = SummaryWriter(str(out / TENSORBOARD_DIR), purge_step=start_step + 1 if start_step else None)
        if not start_step:
            for summary in hparams(flat_config(resolved), {}):
                self.writer.file_writer.add_summary(summary)

    def log(self, step: int, values: dict[str, float]) -> None:
        for name, value in values.items():
            self.writer.add_scalar(name, value, step)

    def close(self) -> None:
        self.writer.close()


class _WandB:
    def __init__(self, out: Path, resolved: dict, start_step: int):
        try:
            import wandb
        except ImportError:
            raise ConfigError("report_to wandb needs wandb: pip install 'mixcse[wandb]'") from None
        (out / WANDB_DIR).mkdir(parents=True, exist_ok=True)
        id_file = out / WANDB_DIR / "mixcse_run_id"
        run_id = id_file.read_text().strip() if start_step and id_file.exists() else uuid.uuid4().hex[:12]
        id_file.write_text(run_id + "\n")
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "mixcse"), dir=str(out), id=run_id,
                              name=out.name, config=flat_config(resolved), resume="allow")

    def log(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def close(self) -> None:
        self.run.finish()


class Trackers:
    """Fans a record out to every backend. Closed at exit too, so that a run stopped by an error (a non-finite
    loss) still flushes what it logged."""

    def __init__(self, backends: list):
        self.backends = backends
        if backends:
            atexit.register(self.close)

    def log(self, record: dict) -> None:
        if self.backends:
            step, values = _scalars(record)
            for backend in self.backends:
                backend.log(step, values)

    def close(self) -> None:
        backends, self.backends = self.backends, []
        for backend in backends:
            backend.close()
        atexit.unregister(self.close)


def open_trackers(report_to: str, out: Path, resolved: dict, start_step: int = 0) -> Trackers:
    kinds = {"tensorboard": _TensorBoard, "wandb": _WandB}
    return Trackers([kinds[name](Path(out), resolved, start_step) for name in parse_report_to(report_to)])
