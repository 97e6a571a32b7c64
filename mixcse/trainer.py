"""The training loop: plain PyTorch, one obvious path, resumable bit for bit.

``train(config)`` = setup (config, output directory, selector, corpus, model, optimiser) + the loop (step, log,
select, checkpoint) + the final writes. Its pieces live in their own modules: the run directory and checkpoints
(rundir.py), checkpoint selection (evaluation/selection.py), the corpus (data.py), progress (progress.py).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml

from . import distributed
from .config import TrainConfig, build_config
from .data import BatchPlan, CorpusLoader
from .encoder import SentenceEncoder
from .errors import ConfigError, MixCSEError
from .evaluation.pairs import HeldOutPairs
from .evaluation.selection import better, build_selector
from .fast_dropout import use_fast_dropout
from .fileio import atomic_write_text
from .model import load_encoder
from .progress import Progress
from .rundir import (BEST_DIR, RESUME_SCHEDULE_KEYS, MetricsLog, candidate_path, checkpoint_path,
                     clear_owned_outputs, prepare_output_dir, read_checkpoint, resume_changes, rng_state, run_lock,
                     save_checkpoint, saved_record, seed_everything, set_rng_state)
from .step import make_step
from .tracking import Trackers, open_trackers

@dataclass
class TrainResult:
    output_dir: str
    steps: int
    best_step: int | None
    best_dev: float | None
    raw_dev: float | None
    train_seconds: float
    sentences_per_second: float
    select_metric: str | None = None  # the selector's name (e.g. "stsb_dev"); None when nothing selected
    is_main: bool = True  # False on the other ranks of a distributed run, whose step counters are not the run's
    test_pairs: dict | None = None  # {file name: {metric, start, best}} for the config's test_pairs
    wall_seconds: float | None = None  # the whole call: loading, selection, training, saving


def cpu_supports_bf16() -> bool:
    """AVX512-BF16 or AMX: there bf16 matmuls are native and faster than fp32."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def resolve_precision(precision: str, device: torch.device) -> str:
    if precision == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        if cpu_supports_bf16():
            return "bf16"
        print("note: precision auto -> fp32: this CPU has neither AVX512-BF16 nor AMX-BF16, where bf16 would be "
              "slower", file=sys.stderr)
        return "fp32"
    if precision == "fp16" and device.type != "cuda":
        raise ConfigError("precision fp16 needs a CUDA device; on CPU use bf16 or fp32")
    if precision == "bf16" and device.type == "cpu" and not cpu_supports_bf16():
        print("warning: precision bf16 on a CPU with neither AVX512-BF16 nor AMX-BF16: bf16 is emulated here and "
              "many times slower than fp32 (precision: auto picks fp32 on such a CPU)", file=sys.stderr)
    return precision


def optimizer_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """No decay on biases and norm weights (the convention of BERT fine-tuning)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if p.ndim < 2 or "norm" in name.lower() else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def prepare_for_training(encoder: torch.nn.Module, cfg: TrainConfig, device: torch.device) -> None:
    """Move to the device; on CPU, numpy-drawn dropout masks (``fast_cpu_dropout``, see mixcse/fast_dropout.py),
    except for a compiled encoder, whose graph would break at every numpy call (torch's dropout compiles)."""
    encoder.to(device)
    if cfg.fast_cpu_dropout and device.type == "cpu" and not cfg.compile:
        use_fast_dropout(encoder)


def build_optimizer(encoder: torch.nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    """AdamW with the fused kernel where torch has one (CPU, CUDA): one pass over all parameters, the same update
    as the for-each kernel up to rounding, 7x faster on CPU (benchmarks/profile_step.py)."""
    return torch.optim.AdamW(optimizer_groups(encoder, cfg.weight_decay), lr=cfg.learning_rate,
                             fused=device.type in ("cpu", "cuda"))


def linear_schedule(total_steps: int, warmup_steps: int):
    def factor(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return factor


def train(config: TrainConfig | dict, *, overwrite: bool = False, resume: bool = False,
          progress: bool | None = None) -> TrainResult:
    """Train a sentence encoder as ``config`` says; docs/training.md describes the outputs.

    ``progress``: None shows a bar on a terminal and a plain line every 30 s elsewhere; False is silent."""
    with contextlib.ExitStack() as held:  # the output folder's lock, released however the run ends
        return _train(config, overwrite=overwrite, resume=resume, progress=progress, held=held)


def _file_stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns


def _train(config: TrainConfig | dict, *, overwrite: bool, resume: bool, progress: bool | None,
           held: contextlib.ExitStack) -> TrainResult:
    started = time.perf_counter()
    cfg = config if isinstance(config, TrainConfig) else build_config(dict(config))
    cfg.validate()
    ctx = distributed.init_from_env()
    out = Path(cfg.output_dir)
    objective = cfg.objective()
    precision = resolve_precision(cfg.precision, ctx.device)
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    if cfg.batch_size % ctx.world_size:
        raise ConfigError(f"batch_size {cfg.batch_size} is not divisible by the {ctx.world_size} processes")
    per_rank = cfg.batch_size // ctx.world_size
    if cfg.mini_batch_size is not None and per_rank % cfg.mini_batch_size:
        raise ConfigError(f"mini_batch_size {cfg.mini_batch_size} does not divide the per-process batch "
                          f"(batch_size {cfg.batch_size} / {ctx.world_size} processes = {per_rank})")

    resume_asked = resume
    resume = prepare_output_dir(out, cfg.to_dict(), overwrite=overwrite, resume=resume)
    ckpt, ckpt_stamp, history, changed = None, None, [], {}
    if resume:  # the run continues under the config it started with, except for keys that do not change the result
        ckpt_stamp = _file_stamp(checkpoint_path(out))
        ckpt = read_checkpoint(out)
        record = saved_record(out) or {}
        recorded = record.get("config") if isinstance(record.get("config"), dict) else ckpt.get("config") or {}
        changed = resume_changes({**TrainConfig().to_dict(), **recorded}, cfg.to_dict())
        history = [entry for entry in record.get("history") or [] if isinstance(entry, dict)]
        if changed and ctx.is_main:
            listed = ", ".join(f"{key} ({old!r} -> {new!r})" for key, (old, new) in changed.items())
            print(f"note: resuming with changed config keys: {listed}; recorded in config.yaml's history"
                  + ("; the learning rate follows the linear schedule of the new length from here on"
                     if RESUME_SCHEDULE_KEYS & set(changed) else ""), file=sys.stderr)
    # Fail on bad input before anything is written.
    selector, no_selection_note = build_selector(
        cfg.select_on, data_dir=cfg.data_dir, select_data=cfg.select_data, select_split=cfg.select_split,
        batch_size=cfg.eval_batch_size, analysis=cfg.analysis_at_eval, select_docs=cfg.select_docs)
    held_out = HeldOutPairs(cfg.test_pairs, cfg.eval_batch_size) if cfg.test_pairs and ctx.is_main else None
    corpus_loader = CorpusLoader(cfg)
    seed_everything(cfg.seed)
    encoder, tokenizer, source = load_encoder(cfg.model, pooler=cfg.pooler, mlp_only_train=cfg.mlp_only_train,
                                              trust_remote_code=cfg.trust_remote_code)
    # Inference settings travel from the starting model to best/: training length is not inference length.
    inference_length = cfg.inference_max_seq_length or source.get("max_seq_length")
    prepare_for_training(encoder, cfg, ctx.device)
    if ctx.rank:  # every rank starts from the same weights, but draws its own dropout masks (rank 0 keeps `seed`)
        seed_everything(int(np.random.SeedSequence([cfg.seed, ctx.rank]).generate_state(1)[0]))
    if ctx.enabled and not ctx.is_main:
        distributed.barrier(ctx)  # rank 0 builds a missing memory-mapped corpus first; the others then open it
    corpus, description = corpus_loader.open(tokenizer, progress=ctx.is_main and progress is not False)
    if ctx.enabled and ctx.is_main:
        distributed.barrier(ctx)
    plan = BatchPlan(len(corpus), cfg.batch_size, cfg.seed)
    total_steps = plan.total_steps(cfg)
    if ckpt is not None and total_steps < ckpt["state"]["step"]:
        raise ConfigError(f"--resume: the checkpoint is at step {ckpt['state']['step']}, beyond the {total_steps} "
                          f"steps this config asks for; raise max_steps (or epochs), or keep the recorded value")
    if ctx.is_main:
        print(description, flush=True)

    optimizer = build_optimizer(encoder, cfg, ctx.device)
    warmup = int(cfg.warmup_ratio * total_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(total_steps, warmup))
    scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None
    model = encoder
    if ctx.enabled:
        device_ids = [ctx.local_rank] if ctx.device.type == "cuda" else None
        # The backbone's own pooler layer (BERT) is never used: let DDP skip it.
        model = torch.nn.parallel.DistributedDataParallel(encoder, device_ids=device_ids,
                                                          find_unused_parameters=True)
    save_steps = cfg.save_steps or cfg.eval_steps

    state = {"step": 0, "best_dev": None, "best_step": None, "raw_dev": None, "bad_evals": 0,
             "train_seconds": 0.0, "sentences_seen": 0, "test_pairs_start": None}
    resolved = {"config": cfg.to_dict(), "objective": vars(objective) | {}, "precision": precision,
                "world_size": ctx.world_size, "total_steps": total_steps, "steps_per_epoch": plan.steps_per_epoch,
                "torch_threads": torch.get_num_threads(), "device": str(ctx.device),
                "selection": selector.description if selector else None,
                "inference_max_seq_length": inference_length}
    if resume:
        encoder.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        if RESUME_SCHEDULE_KEYS & set(changed):  # the next step's learning rate from the new length's schedule
            factor = linear_schedule(total_steps, warmup)(scheduler.last_epoch)
            for group, base_lr in zip(optimizer.param_groups, scheduler.base_lrs):
                group["lr"] = base_lr * factor
        if scaler is not None and ckpt.get("scaler"):
            scaler.load_state_dict(ckpt["scaler"])
        state.update(ckpt["state"])
        rngs = ckpt["rng"] if isinstance(ckpt["rng"], list) else [ckpt["rng"]]
        if len(rngs) != ctx.world_size:  # another split of the global batch: not the run that was checkpointed
            raise ConfigError(f"--resume: the checkpoint was written by {len(rngs)} process(es), this run has "
                              f"{ctx.world_size}; resume with the same number of processes")
        set_rng_state(rngs[ctx.rank])
        if changed:
            history.append({"step": state["step"], "changed": changed})
        ckpt = None  # its tensors are copied into the model and optimiser
    if history:
        resolved["history"] = history  # config keys changed on --resume: at which step, from what to what
    # One run at a time writes a folder: rank 0 takes its lock, and checks the folder again under it (another run
    # may have written there since the check above); every rank stops on a refusal.
    refusal = None
    if ctx.is_main:
        try:
            held.enter_context(run_lock(out))
            again = prepare_output_dir(out, cfg.to_dict(), overwrite=overwrite, resume=resume_asked, quiet=True)
            if again != resume or (resume and _file_stamp(checkpoint_path(out)) != ckpt_stamp):
                raise MixCSEError(f"output_dir {out} changed while this run was starting (another mixcse train "
                                  f"wrote there); run the command again")
        except MixCSEError as exc:
            refusal = str(exc)
    refusal = distributed.broadcast_object(refusal, ctx)
    if refusal is not None:
        raise MixCSEError(refusal)
    metrics = MetricsLog(out / "metrics.jsonl", enabled=ctx.is_main)
    if ctx.is_main:
        print("mixcse train " + json.dumps(resolved, default=str), flush=True)
        if no_selection_note:
            print(f"note: {no_selection_note}", file=sys.stderr, flush=True)
        if resume:
            metrics.truncate_after(state["step"])
            if changed:
                atomic_write_text(out / "config.yaml", yaml.safe_dump(resolved, sort_keys=False))
        else:
            if out.exists():
                clear_owned_outputs(out)  # only --overwrite, or --resume of a run stopped before its first save
            out.mkdir(parents=True, exist_ok=True)
            (out / "config.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    trackers = open_trackers(cfg.report_to, out, resolved, state["step"]) if ctx.is_main else Trackers([])
    distributed.barrier(ctx)
    inference = SentenceEncoder(encoder, tokenizer, max_seq_length=inference_length, device=ctx.device)
    bar = Progress(total_steps, "train", "steps", initial=state["step"], enabled=ctx.is_main and progress is not False)

    def log(record: dict) -> None:
        metrics.append(record)
        trackers.log(record)

    def save_best() -> None:
        if ctx.is_main:
            encoder.save(out / BEST_DIR, tokenizer, max_seq_length=inference_length)

    def save() -> None:
        rngs = [None] * ctx.world_size
        if ctx.enabled:
            torch.distributed.all_gather_object(rngs, rng_state())
        else:
            rngs = [rng_state()]
        if ctx.is_main:
            save_checkpoint(checkpoint_path(out), {
                "model": encoder.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict() if scaler is not None else None,
                "state": dict(state), "rng": rngs, "config": cfg.to_dict()})

    def select(step: int) -> bool:
        """Score the model on the selector's data; keep it in best/ when it beats every earlier candidate, the
        start model (step 0) included. Returns True when early stopping says stop."""
        selection = selector(inference) if ctx.is_main else None
        selection = distributed.broadcast_object(selection, ctx)
        encoder.train()
        if cfg.save_candidates and ctx.is_main:
            encoder.save(candidate_path(out, step), tokenizer, max_seq_length=inference_length)
        if step == 0:
            state["raw_dev"] = selection.score
        if state["best_step"] is None or better(selection.score, state["best_dev"], selector.greater_is_better):
            state.update(best_dev=selection.score, best_step=step, bad_evals=0)
            save_best()
        else:
            state["bad_evals"] += 1
        log({"step": step, selector.name: selection.score, "best_dev": state["best_dev"],
                        "best_step": state["best_step"], **selection.extras})
        if ctx.is_main:
            what = " (start model)" if step == 0 else f" (best {state['best_dev']:.2f} @ {state['best_step']})"
            bar.write(f"step {step}: {selector.name} {selection.score:.2f}{what}")
        patience = cfg.early_stopping_patience
        return step > 0 and patience is not None and state["bad_evals"] >= patience

    def finite_loss(result, step: int) -> float:
        """The step's loss as a float (a host sync); a non-finite one stops the run before anything is saved."""
        value = result.loss.loss.item()
        if not math.isfinite(value):
            raise MixCSEError(f"non-finite loss ({value}) at step {step}; lower the learning rate or use precision "
                              f"fp32")
        return value

    encoder.train()
    if state["step"] == 0 and selector is not None:
        select(0)  # the start model is a candidate: a run never ships a model worse than the one it started from
    if state["step"] == 0 and held_out is not None:
        state["test_pairs_start"] = held_out(inference)
        encoder.train()

    local = slice(ctx.rank * cfg.batch_size // ctx.world_size, (ctx.rank + 1) * cfg.batch_size // ctx.world_size)
    window_start, window_sentences = time.perf_counter(), 0
    patience = cfg.early_stopping_patience
    stop = selector is not None and patience is not None and state["step"] > 0 and state["bad_evals"] >= patience
    train_step = make_step(cfg, ctx, model, optimizer, objective, scaler, precision=precision)
    while state["step"] < total_steps and not stop:
        step = state["step"]
        t0 = time.perf_counter()
        result = train_step(corpus.batch(plan.indices(step)[local]))
        scheduler.step()
        state["step"] = step = step + 1
        state["sentences_seen"] += cfg.batch_size
        state["train_seconds"] += time.perf_counter() - t0
        window_sentences += cfg.batch_size

        if step % cfg.log_steps == 0 or step == total_steps:  # the only host syncs of the loop
            out_loss = result.loss
            loss_value = finite_loss(result, step)
            now = time.perf_counter()
            record = {"step": step, "loss": loss_value, "simcse_loss": out_loss.simcse_loss.item(),
                      "lr": scheduler.get_last_lr()[0],
                      "anchor_grad_norm": result.anchor_grad_norm().item(),
                      "sentences_per_second": window_sentences / max(now - window_start, 1e-9)}
            record.update({k: v.item() for k, v in out_loss.stats.items()})
            log(record)
            bar.update(1, loss=loss_value, best=state["best_dev"], sentences_per_s=record["sentences_per_second"])
            window_start, window_sentences = now, 0
        else:
            bar.update(1)
        if selector is not None and (step % cfg.eval_steps == 0 or step == total_steps):
            stop = select(step)
        if step % save_steps == 0 or step == total_steps or stop or state["best_step"] == step:
            finite_loss(result, step)  # between log steps too: a diverged model never replaces the last checkpoint
            save()  # also when best/ changed, so that a resumed run's record always matches best/
    bar.close()
    trackers.close()

    if ctx.is_main:
        if state["best_step"] is None:  # nothing to select on: the final model is the one shipped
            save_best()
            state["best_step"] = state["step"]
        summary = {k: state[k] for k in ("raw_dev", "best_dev", "best_step", "train_seconds")}
        summary.update(steps=state["step"], total_steps=total_steps, test_pooler=encoder.test_pooler,
                       sentences_per_second=state["sentences_seen"] / max(state["train_seconds"], 1e-9),
                       select_metric=selector.name if selector else None,
                       selection=selector.description if selector else None,
                       start_won=selector is not None and state["best_step"] == 0,
                       inference_max_seq_length=inference_length)
        if held_out is not None:
            summary["test_pairs"] = _held_out_report(held_out, state, out, ctx.device)
        summary["wall_seconds"] = time.perf_counter() - started  # this call's (a resumed run: since the resume)
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        _write_card(out, resolved, summary)
        if summary["start_won"]:
            print(f"note: no checkpoint beat the start model on {selector.name}; best/ is the start model",
                  file=sys.stderr)
        print("done " + json.dumps(summary), flush=True)
    distributed.close(ctx)
    return TrainResult(str(out), state["step"], state["best_step"], state["best_dev"], state["raw_dev"],
                       state["train_seconds"], state["sentences_seen"] / max(state["train_seconds"], 1e-9),
                       selector.name if selector else None, ctx.is_main,
                       summary.get("test_pairs") if ctx.is_main else None,
                       summary.get("wall_seconds") if ctx.is_main else None)


def _held_out_report(held_out: HeldOutPairs, state: dict, out: Path, device: torch.device) -> dict:
    """{file name: {metric, start, best}}: the held-out pair files on the start model and on best/."""
    start = state["test_pairs_start"] or {}
    best = start if state["best_step"] == 0 and start else held_out(SentenceEncoder.load(out / BEST_DIR,
                                                                                         device=str(device)))
    return {name: {"metric": r["metric"], "start": start.get(name, {}).get("value"), "best": r["value"],
                   "file": r["file"]} for name, r in best.items()}


def _write_card(out: Path, resolved: dict, summary: dict) -> None:
    try:
        from .modelcard import write_model_card
    except ImportError:
        return
    write_model_card(out / BEST_DIR, resolved, summary)
