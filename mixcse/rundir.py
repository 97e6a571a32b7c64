"""A training run's output directory: who may write there, the metrics log, and resumable checkpoints.

    prepare_output_dir(out, config, overwrite=, resume=) -> bool   whether to resume from out/checkpoint
    clear_owned_outputs(out)                                       what --overwrite removes (mixcse's files only)
    MetricsLog(path).append(record) / .truncate_after(step)         metrics.jsonl, one JSON object per line
    save_checkpoint(path, payload) / load_checkpoint(path)           written atomically (temp file + rename)
    rng_state() / set_rng_state(state)                             python, numpy, torch (+ CUDA) generators

Policy: a non-empty directory is never written into unless ``--overwrite`` (which replaces only the outputs named
in OWNED_OUTPUTS) or ``--resume``. ``--resume`` on a directory that holds this very run's config.yaml but no
checkpoint yet (a run stopped before its first save) starts from step 0, with a note.
"""
from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import yaml

from .errors import MixCSEError
from .fileio import atomic_path

CHECKPOINT_DIR = "checkpoint"
CHECKPOINT_FILE = "state.pt"
BEST_DIR = "best"
CANDIDATES_DIR = "candidates"  # save_candidates: candidates/step-N/, one saved model per selection
OWNED_OUTPUTS = (CHECKPOINT_DIR, BEST_DIR, CANDIDATES_DIR, "metrics.jsonl", "config.yaml", "summary.json",
                 "runs", "wandb")  # runs/, wandb/: the experiment trackers' files (mixcse/tracking.py)


def checkpoint_path(out: Path) -> Path:
    return Path(out) / CHECKPOINT_DIR / CHECKPOINT_FILE


def candidate_path(out: Path, step: int) -> Path:
    """Where ``save_candidates`` puts the model scored at ``step``."""
    return Path(out) / CANDIDATES_DIR / f"step-{step}"


def _saved_config(out: Path) -> dict | None:
    try:
        return (yaml.safe_load((out / "config.yaml").read_text(encoding="utf-8")) or {}).get("config")
    except (OSError, yaml.YAMLError, AttributeError):
        return None


def prepare_output_dir(out: Path, config: dict, *, overwrite: bool, resume: bool) -> bool:
    """Check that the run may use ``out``; returns True when it resumes from a checkpoint. Writes nothing."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise MixCSEError(f"output_dir exists and is not a directory: {out}")
    if resume:
        if checkpoint_path(out).exists():
            return True
        foreign = [p.name for p in out.iterdir() if p.name not in OWNED_OUTPUTS] if out.is_dir() else []
        if _saved_config(out) == config and not foreign:
            print(f"note: --resume: no checkpoint in {out / CHECKPOINT_DIR} yet (the run stopped before its first "
                  f"save); starting this run from step 0", file=sys.stderr)
            return False
        raise MixCSEError(f"--resume: no checkpoint in {out / CHECKPOINT_DIR}"
                          + ("" if not out.is_dir() or not any(out.iterdir()) else
                             "; the folder holds another run's files: pass --overwrite to replace them"))
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise MixCSEError(f"output_dir {out} is not empty; pass --overwrite to replace it or --resume to continue")
    return False


def clear_owned_outputs(out: Path) -> None:
    for name in OWNED_OUTPUTS:
        target = Path(out) / name
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)


class MetricsLog:
    def __init__(self, path: Path, enabled: bool = True):
        self.path, self.enabled = Path(path), enabled

    def append(self, record: dict) -> None:
        if self.enabled:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")

    def truncate_after(self, step: int) -> None:
        """Drop what a killed run logged after its last checkpoint: the resumed run logs those steps again."""
        if not self.enabled or not self.path.exists():
            return
        kept = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # a line cut off by the kill: the resumed run logs its step again
                continue
            if record.get("step", 0) <= step:
                kept.append(line)
        self.path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")

    def records(self) -> list[dict]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]


def save_checkpoint(path: Path, payload: dict) -> None:
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)


def load_checkpoint(path: Path, mmap: bool = False) -> dict:
    """On the CPU: RNG states must stay CPU byte tensors; load_state_dict moves weights and optimiser state to
    their parameters' device. ``mmap``: tensors stay on disk until touched (to read only the small state)."""
    return torch.load(path, map_location="cpu", weights_only=False, mmap=mmap)


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
