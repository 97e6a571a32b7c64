"""A training run's output directory: who may write there, the metrics log, and resumable checkpoints.

    prepare_output_dir(out, config, overwrite=, resume=) -> bool   whether to resume from out/checkpoint
    run_lock(out)                                                  one run at a time writes out (flock, see below)
    clear_owned_outputs(out)                                       what --overwrite removes (mixcse's files only)
    read_checkpoint(out) / saved_record(out)                       what --resume continues from
    resume_changes(recorded, config) -> {key: [old, new]}          the config keys --resume may change
    MetricsLog(path).append(record) / .truncate_after(step)         metrics.jsonl, one JSON object per line
    save_checkpoint(path, payload) / load_checkpoint(path)           written atomically (temp file + rename)
    rng_state() / set_rng_state(state)                             python, numpy, torch (+ CUDA) generators

Policy: a non-empty directory is never written into unless ``--overwrite`` (which replaces only the outputs named
in OWNED_OUTPUTS) or ``--resume``. ``--resume`` on a directory that holds this very run's config.yaml but no
checkpoint yet (a run stopped before its first save) starts from step 0, with a note. The run that writes a folder
holds an exclusive ``flock`` on its ``.mixcse.lock`` for as long as it runs: a second run on the same folder is
refused, and a lock file left by a killed run blocks nothing (the lock dies with its process).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
import yaml

from mixcse.errors import MixCSEError
from mixcse.utils.files import atomic_path

CHECKPOINT_DIR = "checkpoint"
CHECKPOINT_FILE = "state.pt"
BEST_DIR = "best"
CANDIDATES_DIR = "candidates"  # save_candidates: candidates/step-N/, one saved model per selection
OWNED_OUTPUTS = (CHECKPOINT_DIR, BEST_DIR, CANDIDATES_DIR, "metrics.jsonl", "config.yaml", "summary.json",
                 "runs", "wandb")  # runs/, wandb/: the experiment trackers' files (mixcse/training/tracking.py)
# Locked by the run writing the folder. Never removed, not even by --overwrite: a run that removed it while another
# process waited could not exclude a third one, which would lock a new file of the same name.
LOCK_FILE = ".mixcse.lock"
CHECKPOINT_KEYS = ("model", "optimizer", "scheduler", "state", "rng")

# Config keys --resume may change: they do not change the function the weights are trained to (speed and numerics
# of the same computation, where files go, what is logged and tracked, how often the model is scored and saved).
# max_steps and epochs may change as well (a longer or shorter run): from the resumed step on, the learning rate
# follows the linear schedule of the new length. Any other change is refused: the weights would no longer be the
# product of the recorded config. Every change is recorded in config.yaml's ``history`` and in the model card.
RESUME_FREE_KEYS = frozenset({
    "output_dir", "trust_remote_code", "corpus", "corpus_cache_dir", "mini_batch_size", "precision", "num_threads",
    "length_buckets", "compile", "fast_cpu_dropout", "data_dir", "save_candidates", "eval_steps", "eval_batch_size",
    "analysis_at_eval", "early_stopping_patience", "save_steps", "log_steps", "report_to"})
RESUME_SCHEDULE_KEYS = frozenset({"max_steps", "epochs"})


def checkpoint_path(out: Path) -> Path:
    return Path(out) / CHECKPOINT_DIR / CHECKPOINT_FILE


def candidate_path(out: Path, step: int) -> Path:
    """Where ``save_candidates`` puts the model scored at ``step``."""
    return Path(out) / CANDIDATES_DIR / f"step-{step}"


def saved_record(out: Path) -> dict | None:
    """The run's config.yaml (``config``, the resolved settings, ``history``), or None when there is none."""
    try:
        record = yaml.safe_load((Path(out) / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return record if isinstance(record, dict) else None


def _saved_config(out: Path) -> dict | None:
    config = (saved_record(out) or {}).get("config")
    return recorded_config(config) if isinstance(config, dict) else None


def recorded_config(config: dict) -> dict:
    """A config recorded by an earlier run, as today's keys read it: old names of lever keys renamed, and keys it
    does not record (added since) at their defaults."""
    from mixcse.training.config import TrainConfig
    from mixcse.training.levers import renamed_keys

    renamed = renamed_keys()
    return {**TrainConfig().to_dict(), **{renamed.get(k, k): v for k, v in config.items()}}


def _entries(out: Path) -> list[Path]:
    """What a folder holds, the lock file aside (it stays after every run)."""
    return [p for p in out.iterdir() if p.name != LOCK_FILE] if out.is_dir() else []


def prepare_output_dir(out: Path, config: dict, *, overwrite: bool, resume: bool, quiet: bool = False) -> bool:
    """Check that the run may use ``out``; returns True when it resumes from a checkpoint. Writes nothing.
    ``quiet``: no note (the check again, under the lock)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise MixCSEError(f"output_dir exists and is not a directory: {out}")
    if resume:
        if checkpoint_path(out).exists():
            return True
        foreign = [p.name for p in _entries(out) if p.name not in OWNED_OUTPUTS]
        if _saved_config(out) == config and not foreign:
            if not quiet:
                print(f"note: --resume: no checkpoint in {out / CHECKPOINT_DIR} yet (the run stopped before its "
                      f"first save); starting this run from step 0", file=sys.stderr)
            return False
        raise MixCSEError(f"--resume: no checkpoint in {out / CHECKPOINT_DIR}"
                          + ("" if not _entries(out) else
                             "; the folder holds another run's files: pass --overwrite to replace them"))
    if _entries(out) and not overwrite:
        raise MixCSEError(f"output_dir {out} is not empty; pass --overwrite to replace it or --resume to continue")
    return False


@contextlib.contextmanager
def run_lock(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``out`` (``flock`` on ``out/.mixcse.lock``, created with ``out`` if missing) for the
    block; MixCSEError at once when another process holds it. The lock is released when the block ends, and by the
    kernel when the process dies, so a lock file left by a killed run does not block the next one."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    handle = open(out / LOCK_FILE, "a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise MixCSEError(f"output_dir {out} is in use by another mixcse train (it holds the lock on "
                          f"{out / LOCK_FILE}); wait until it ends, or choose another output_dir") from None
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)  # also for a forked worker that still holds a copy of the descriptor
        handle.close()


def read_checkpoint(out: Path) -> dict:
    """The checkpoint ``--resume`` continues from, read in full; one error naming the file when it cannot be read
    (truncated, overwritten, or lacking what a checkpoint holds) that says what is intact and what to do."""
    path = checkpoint_path(out)
    try:
        checkpoint = load_checkpoint(path)
        missing = [key for key in CHECKPOINT_KEYS if key not in checkpoint]
        reason = f"no {', '.join(missing)} in it" if missing else None
    except Exception as exc:  # torch.load fails in many ways on a damaged file (OSError, RuntimeError, EOFError,
        # UnpicklingError, KeyError, ...): each means the same here, that the file cannot be resumed from
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
    if reason is not None:
        best = Path(out) / BEST_DIR
        raise MixCSEError(f"--resume: the checkpoint {path} is damaged ({reason}); nothing was changed"
                          + (f"; {best}, the best model so far, is intact" if best.is_dir() else "")
                          + "; pass --overwrite instead of --resume to train again from step 0")
    return checkpoint


def resume_changes(recorded: dict, config: dict) -> dict[str, list]:
    """``{key: [recorded value, new value]}`` for every key of ``config`` that differs from the run's record; a
    MixCSEError naming the keys when any would change what the run trains (see RESUME_FREE_KEYS)."""
    changed = {key: [recorded.get(key), value] for key, value in config.items() if recorded.get(key) != value}
    refused = [key for key in changed if key not in RESUME_FREE_KEYS | RESUME_SCHEDULE_KEYS]
    if refused:
        listed = ", ".join(f"{key} ({changed[key][0]!r} -> {changed[key][1]!r})" for key in refused)
        raise MixCSEError(f"--resume cannot change {listed}: the weights were trained with the recorded value"
                          f"{'s' if len(refused) > 1 else ''} (config.yaml); resume with "
                          f"{'them' if len(refused) > 1 else 'it'}, or pass --overwrite or use a new output_dir to "
                          f"train with the new one{'s' if len(refused) > 1 else ''}")
    return changed


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


@contextlib.contextmanager
def random_state_kept():
    """Evaluation leaves the random state as it found it: how often and on how many candidates a run scores never
    changes the dropout masks its training steps draw."""
    state = rng_state()
    try:
        yield
    finally:
        set_rng_state(state)


def file_stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns


def read_resume(out: Path, config: dict, defaults: dict, is_main: bool) -> tuple[dict, tuple | None, list, dict]:
    """(checkpoint, its file stamp, the config history, the keys changed since): a resumed run continues under the
    config it started with, except for keys that do not change the result (``defaults``: every key's default)."""
    ckpt_stamp = file_stamp(checkpoint_path(out))
    ckpt = read_checkpoint(out)
    record = saved_record(out) or {}
    recorded = record.get("config") if isinstance(record.get("config"), dict) else ckpt.get("config") or {}
    changed = resume_changes({**defaults, **recorded_config(recorded)}, config)
    history = [entry for entry in record.get("history") or [] if isinstance(entry, dict)]
    if changed and is_main:
        listed = ", ".join(f"{key} ({old!r} -> {new!r})" for key, (old, new) in changed.items())
        print(f"note: resuming with changed config keys: {listed}; recorded in config.yaml's history"
              + ("; the learning rate follows the linear schedule of the new length from here on"
                 if RESUME_SCHEDULE_KEYS & set(changed) else ""), file=sys.stderr)
    return ckpt, ckpt_stamp, history, changed


def claim_folder(held: contextlib.ExitStack, out: Path, config: dict, *, resumed: bool, overwrite: bool,
                 resume_asked: bool, ckpt_stamp: tuple | None) -> str | None:
    """(rank 0) Take the folder's lock and check the folder again under it: another run may have written there
    since the first check. The refusal's message, or None."""
    try:
        held.enter_context(run_lock(out))
        again = prepare_output_dir(out, config, overwrite=overwrite, resume=resume_asked, quiet=True)
        if again != resumed or (resumed and file_stamp(checkpoint_path(out)) != ckpt_stamp):
            raise MixCSEError(f"output_dir {out} changed while this run was starting (another mixcse train wrote "
                              f"there); run the command again")
    except MixCSEError as exc:
        return str(exc)
    return None
