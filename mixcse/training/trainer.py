"""The training loop: plain PyTorch, one obvious path, resumable bit for bit.

``train(config)`` = ``Run(...)`` (setup: config, output folder, selector, corpus, model, optimiser, resume) then
``run.train()``: a short loop of ``step`` / ``log`` / ``evaluate`` / ``save``, and ``finish`` (summary, card).
Its pieces live in their own modules: the run folder and checkpoints (rundir.py), checkpoint selection
(mixcse/evaluation/selection.py), the corpus (mixcse/data/loader.py), the optimiser step (step.py), progress
(mixcse/utils/progress.py).
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

from mixcse.data.loader import CorpusLoader
from mixcse.errors import ConfigError, MixCSEError
from mixcse.evaluation.pairs import PairsEvaluator
from mixcse.evaluation.selection import better, build_guard, build_selector
from mixcse.models.dropout import use_fast_dropout
from mixcse.models.encoder import load_encoder
from mixcse.models.merge import blend
from mixcse.models.sentence_encoder import SentenceEncoder
from mixcse.training import distributed
from mixcse.training.config import TrainConfig, build_config
from mixcse.training.rundir import (
    BEST_DIR,
    RESUME_SCHEDULE_KEYS,
    MetricsLog,
    candidate_path,
    checkpoint_path,
    clear_owned_outputs,
    prepare_output_dir,
    read_checkpoint,
    resume_changes,
    rng_state,
    run_lock,
    save_checkpoint,
    saved_record,
    seed_everything,
    set_rng_state,
)
from mixcse.training.step import make_step
from mixcse.training.teacher import StartModelSignals, mine_mutual_neighbours, start_embeddings
from mixcse.training.tracking import Trackers, open_trackers
from mixcse.utils.files import atomic_write_text
from mixcse.utils.progress import Progress


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
    guard: dict | None = None  # {metric, start, best, tolerance, refused}: the forgetting guard, when set
    best_alpha: float | None = None  # the shipped candidate's weight on its checkpoint (1.0: not a blend)


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
    """Move to the device; on CPU, numpy-drawn dropout masks (``fast_cpu_dropout``, see mixcse/models/dropout.py),
    except for a compiled encoder, whose graph would break at every numpy call (torch's dropout compiles)."""
    encoder.to(device)
    if cfg.fast_cpu_dropout and device.type == "cpu" and not cfg.compile:
        use_fast_dropout(encoder)


def build_optimizer(encoder: torch.nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    """AdamW with the fused kernel where torch has one (CPU, CUDA): one pass over all parameters, the same update
    as the for-each kernel up to rounding, 7x faster on CPU (benchmarks/results/profile_step.json, "adamw")."""
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
        return Run(config, overwrite=overwrite, resume=resume, progress=progress, held=held).train()


def _file_stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns


class Run:
    """One training run: ``Run(...)`` sets it up (nothing is written before every input is checked), ``train()``
    runs the loop. ``state`` is what a checkpoint keeps of the loop; ``resolved`` is what config.yaml records."""

    def __init__(self, config: TrainConfig | dict, *, overwrite: bool, resume: bool, progress: bool | None,
                 held: contextlib.ExitStack):
        self.started = time.perf_counter()
        cfg = self.cfg = config if isinstance(config, TrainConfig) else build_config(dict(config))
        cfg.validate()
        ctx = self.ctx = distributed.init_from_env()
        self.out = Path(cfg.output_dir)
        self.objective = cfg.objective()
        self.precision = resolve_precision(cfg.precision, ctx.device)
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        self._check_batch_split()
        self.resume = prepare_output_dir(self.out, cfg.to_dict(), overwrite=overwrite, resume=resume)
        ckpt, ckpt_stamp, history, changed = self._read_resume() if self.resume else (None, None, [], {})
        # Fail on bad input before anything is written.
        self.selector, self.no_selection_note = build_selector(
            cfg.select_on, data_dir=cfg.data_dir, select_data=cfg.select_data, select_split=cfg.select_split,
            analysis=cfg.analysis_at_eval, select_docs=cfg.select_docs)
        self.held_out = PairsEvaluator(cfg.test_pairs) if cfg.test_pairs and ctx.is_main else None
        self.guard = build_guard(cfg.guard_data, data_dir=cfg.data_dir) if cfg.guard_data else None
        if self.guard is not None and self.selector is None:
            raise ConfigError(f"guard_data guards checkpoint selection, and this run selects nothing "
                              f"({self.no_selection_note or 'select_on: none'})")
        description = self._load_model_and_corpus(progress)
        if ckpt is not None and self.total_steps < ckpt["state"]["step"]:
            raise ConfigError(f"--resume: the checkpoint is at step {ckpt['state']['step']}, beyond the "
                              f"{self.total_steps} steps this config asks for; raise max_steps (or epochs), or keep "
                              f"the recorded value")
        if ctx.is_main:
            print(description, flush=True)
        self._build_optimizer()
        self.state = {"step": 0, "best_dev": None, "best_step": None, "raw_dev": None, "bad_evals": 0,
                      "train_seconds": 0.0, "sentences_seen": 0, "test_pairs_start": None, "best_alpha": 1.0,
                      "guard_start": None, "guard_best": None, "candidates": []}
        self.resolved = {
            "config": cfg.to_dict(), "objective": vars(self.objective) | {}, "precision": self.precision,
            "world_size": ctx.world_size, "total_steps": self.total_steps,
            "steps_per_epoch": self.plan.steps_per_epoch, "torch_threads": torch.get_num_threads(),
            "device": str(ctx.device), "selection": self.selector.description if self.selector else None,
            "guard": self.guard.description if self.guard else None,
            "inference_max_seq_length": self.inference_length}
        if self.resume:
            self._restore(ckpt, changed)
            if changed:
                history.append({"step": self.state["step"], "changed": changed})
        if history:
            self.resolved["history"] = history  # config keys changed on --resume: at which step, from what to what
        self._claim_folder(held, overwrite=overwrite, resume_asked=resume, ckpt_stamp=ckpt_stamp)
        self._open_outputs(changed, progress)

    # ------------------------------------------------------------------------------------------------ setup
    def _check_batch_split(self) -> None:
        cfg, ctx = self.cfg, self.ctx
        if cfg.batch_size % ctx.world_size:
            raise ConfigError(f"batch_size {cfg.batch_size} is not divisible by the {ctx.world_size} processes")
        per_rank = cfg.batch_size // ctx.world_size
        if cfg.mini_batch_size is not None and per_rank % cfg.mini_batch_size:
            raise ConfigError(f"mini_batch_size {cfg.mini_batch_size} does not divide the per-process batch "
                              f"(batch_size {cfg.batch_size} / {ctx.world_size} processes = {per_rank})")

    def _read_resume(self) -> tuple[dict, tuple | None, list[dict], dict]:
        """(checkpoint, its file stamp, the config history, the keys changed since): the run continues under the
        config it started with, except for keys that do not change the result."""
        out = self.out
        ckpt_stamp = _file_stamp(checkpoint_path(out))
        ckpt = read_checkpoint(out)
        record = saved_record(out) or {}
        recorded = record.get("config") if isinstance(record.get("config"), dict) else ckpt.get("config") or {}
        changed = resume_changes({**TrainConfig().to_dict(), **recorded}, self.cfg.to_dict())
        history = [entry for entry in record.get("history") or [] if isinstance(entry, dict)]
        if changed and self.ctx.is_main:
            listed = ", ".join(f"{key} ({old!r} -> {new!r})" for key, (old, new) in changed.items())
            print(f"note: resuming with changed config keys: {listed}; recorded in config.yaml's history"
                  + ("; the learning rate follows the linear schedule of the new length from here on"
                     if RESUME_SCHEDULE_KEYS & set(changed) else ""), file=sys.stderr)
        return ckpt, ckpt_stamp, history, changed

    def _load_model_and_corpus(self, progress: bool | None) -> str:
        """The start model, the corpus and its batch plan; returns the corpus's one-line description."""
        cfg, ctx = self.cfg, self.ctx
        corpus_loader = CorpusLoader(cfg)
        seed_everything(cfg.seed)
        self.encoder, self.tokenizer, source = load_encoder(
            cfg.model, pooler=cfg.pooler, mlp_only_train=cfg.mlp_only_train, trust_remote_code=cfg.trust_remote_code)
        limit = getattr(self.encoder.backbone.config, "max_position_embeddings", None)
        for key in ("max_seq_length", "inference_max_seq_length"):
            if limit and (getattr(cfg, key) or 0) > limit:
                raise ConfigError(f"{key} {getattr(cfg, key)} exceeds the {limit} positions of {cfg.model}")
        # Inference settings travel from the starting model to best/: training length is not inference length.
        self.inference_length = cfg.inference_max_seq_length or source.get("max_seq_length")
        prepare_for_training(self.encoder, cfg, ctx.device)
        # the start model's weights, for the blends that selection scores (interpolate)
        self.start_state = self._weights() if len(cfg.blend_weights()) > 1 else None
        pairs, self.signals = self._start_model_levers(corpus_loader)
        if ctx.rank:  # every rank starts from the same weights, but draws its own dropout masks (rank 0: `seed`)
            seed_everything(int(np.random.SeedSequence([cfg.seed, ctx.rank]).generate_state(1)[0]))
        if ctx.enabled and not ctx.is_main:
            distributed.barrier(ctx)  # rank 0 builds a missing memory-mapped corpus first; the others then open it
        self.corpus, description = corpus_loader.open(self.tokenizer, progress=ctx.is_main and progress is not False,
                                                      pairs=pairs)
        if ctx.enabled and ctx.is_main:
            distributed.barrier(ctx)
        self.plan = corpus_loader.plan
        self.total_steps = self.plan.total_steps(cfg)
        return description

    def _start_model_levers(self, corpus_loader) -> tuple[list | None, StartModelSignals | None]:
        """``positives: mined`` pairs and the per-batch signals (false negatives, distillation) from the start
        model's embeddings of the training text (mixcse/training/teacher.py); (None, None) when no lever is on."""
        cfg, ctx = self.cfg, self.ctx
        if not cfg.uses_start_embeddings():
            return None, None
        texts = corpus_loader.sentences
        anchors = [a for a, _ in texts] if cfg.positives in ("neighbours", "title") else texts
        t0 = time.perf_counter()
        emb = start_embeddings(self.encoder, self.tokenizer, anchors, max_seq_length=cfg.max_seq_length,
                               batch_size=cfg.eval_batch_size, device=ctx.device)
        note = f"start model: embedded {len(anchors):,} training sentences in {time.perf_counter() - t0:.1f}s"
        pairs = None
        if cfg.positives == "mined":
            pairs, report = mine_mutual_neighbours(anchors, emb, cfg.mine_threshold)
            self.mined = report
            note += (f"; positives mined: {report['with_mined_positive']:,} of {report['sentences']:,} sentences "
                     f"have a mutual nearest neighbour at cosine >= {cfg.mine_threshold:g}, e.g. "
                     + " | ".join(f"{a!r} ~ {b!r} ({c:.2f})" for a, b, c in report["sample"]))
        if ctx.is_main:
            print(note, file=sys.stderr, flush=True)
        signals = None
        if cfg.false_negative_threshold is not None or cfg.distill_weight:
            signals = StartModelSignals(emb, false_negative_threshold=cfg.false_negative_threshold,
                                        distill=bool(cfg.distill_weight))
        return pairs, signals

    def _build_optimizer(self) -> None:
        cfg, ctx = self.cfg, self.ctx
        self.optimizer = build_optimizer(self.encoder, cfg, ctx.device)
        self.warmup = int(cfg.warmup_ratio * self.total_steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, linear_schedule(self.total_steps,
                                                                                           self.warmup))
        self.scaler = torch.amp.GradScaler("cuda") if self.precision == "fp16" else None
        self.model = self.encoder
        if ctx.enabled:
            device_ids = [ctx.local_rank] if ctx.device.type == "cuda" else None
            # The backbone's own pooler layer (BERT) is never used: let DDP skip it.
            self.model = torch.nn.parallel.DistributedDataParallel(self.encoder, device_ids=device_ids,
                                                                   find_unused_parameters=True)

    def _restore(self, ckpt: dict, changed: dict) -> None:
        self.encoder.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.scheduler.load_state_dict(ckpt["scheduler"])
        if RESUME_SCHEDULE_KEYS & set(changed):  # the next step's learning rate from the new length's schedule
            factor = linear_schedule(self.total_steps, self.warmup)(self.scheduler.last_epoch)
            for group, base_lr in zip(self.optimizer.param_groups, self.scheduler.base_lrs):
                group["lr"] = base_lr * factor
        if self.scaler is not None and ckpt.get("scaler"):
            self.scaler.load_state_dict(ckpt["scaler"])
        self.state.update(ckpt["state"])
        rngs = ckpt["rng"] if isinstance(ckpt["rng"], list) else [ckpt["rng"]]
        if len(rngs) != self.ctx.world_size:  # another split of the global batch: not the run that was checkpointed
            raise ConfigError(f"--resume: the checkpoint was written by {len(rngs)} process(es), this run has "
                              f"{self.ctx.world_size}; resume with the same number of processes")
        set_rng_state(rngs[self.ctx.rank])

    def _claim_folder(self, held: contextlib.ExitStack, *, overwrite: bool, resume_asked: bool,
                      ckpt_stamp: tuple | None) -> None:
        """One run at a time writes a folder: rank 0 takes its lock and checks the folder again under it (another
        run may have written there since the first check); every rank stops on a refusal."""
        refusal, out = None, self.out
        if self.ctx.is_main:
            try:
                held.enter_context(run_lock(out))
                again = prepare_output_dir(out, self.cfg.to_dict(), overwrite=overwrite, resume=resume_asked,
                                           quiet=True)
                if again != self.resume or (self.resume and _file_stamp(checkpoint_path(out)) != ckpt_stamp):
                    raise MixCSEError(f"output_dir {out} changed while this run was starting (another mixcse train "
                                      f"wrote there); run the command again")
            except MixCSEError as exc:
                refusal = str(exc)
        refusal = distributed.broadcast_object(refusal, self.ctx)
        if refusal is not None:
            raise MixCSEError(refusal)

    def _open_outputs(self, changed: dict, progress: bool | None) -> None:
        ctx, out, state = self.ctx, self.out, self.state
        self.metrics = MetricsLog(out / "metrics.jsonl", enabled=ctx.is_main)
        if ctx.is_main:
            print("mixcse train " + json.dumps(self.resolved, default=str), flush=True)
            if self.no_selection_note:
                print(f"note: {self.no_selection_note}", file=sys.stderr, flush=True)
            if self.resume:
                self.metrics.truncate_after(state["step"])
                if changed:
                    atomic_write_text(out / "config.yaml", yaml.safe_dump(self.resolved, sort_keys=False))
            else:
                if out.exists():
                    clear_owned_outputs(out)  # only --overwrite, or --resume of a run stopped before its first save
                out.mkdir(parents=True, exist_ok=True)
                (out / "config.yaml").write_text(yaml.safe_dump(self.resolved, sort_keys=False))
        self.trackers = (open_trackers(self.cfg.report_to, out, self.resolved, state["step"]) if ctx.is_main
                         else Trackers([]))
        distributed.barrier(ctx)
        self.inference = SentenceEncoder(self.encoder, self.tokenizer, max_seq_length=self.inference_length,
                                         device=ctx.device)
        self.bar = Progress(self.total_steps, "train", "steps", initial=state["step"],
                            enabled=ctx.is_main and progress is not False)

    # ------------------------------------------------------------------------------------------------ the loop
    def train(self) -> TrainResult:
        cfg, ctx, state, selector = self.cfg, self.ctx, self.state, self.selector
        self.encoder.train()
        if state["step"] == 0 and selector is not None:
            self.evaluate(0)  # the start model is a candidate: a run never ships a model worse than its start
        if state["step"] == 0 and self.held_out is not None:
            with _random_state_kept():
                state["test_pairs_start"] = self._held_out_scores(self.inference)
            self.encoder.train()
        local = slice(ctx.rank * cfg.batch_size // ctx.world_size, (ctx.rank + 1) * cfg.batch_size // ctx.world_size)
        self.window = (time.perf_counter(), 0)  # (start, sentences) of the sentences/s window
        patience = cfg.early_stopping_patience
        stop = selector is not None and patience is not None and state["step"] > 0 and state["bad_evals"] >= patience
        train_step = make_step(cfg, ctx, self.model, self.optimizer, self.objective, self.scaler,
                               precision=self.precision)
        save_steps = cfg.save_steps or cfg.eval_steps
        while state["step"] < self.total_steps and not stop:
            indices = self.plan.indices(state["step"])
            signals = self.signals(indices) if self.signals is not None else None
            result = self.step(train_step, self.corpus.batch(indices[local]), signals)
            step = state["step"]
            if step % cfg.log_steps == 0 or step == self.total_steps:  # the only host syncs of the loop
                self.log(result)
            else:
                self.bar.update(1)
            if selector is not None and (step % cfg.eval_steps == 0 or step == self.total_steps):
                stop = self.evaluate(step)
            if step % save_steps == 0 or step == self.total_steps or stop or state["best_step"] == step:
                self.finite_loss(result)  # between log steps too: a diverged model never replaces the checkpoint
                self.save()  # also when best/ changed, so that a resumed run's record always matches best/
        self.bar.close()
        self.trackers.close()
        return self.finish()

    def step(self, train_step, batch: dict, signals: dict | None = None):
        """One optimiser step on one global batch (this rank's share); the step's result, not yet synced."""
        t0 = time.perf_counter()
        result = train_step(batch, signals=signals)
        self.scheduler.step()
        self.state["step"] += 1
        self.state["sentences_seen"] += self.cfg.batch_size
        self.state["train_seconds"] += time.perf_counter() - t0
        self.window = (self.window[0], self.window[1] + self.cfg.batch_size)
        return result

    def log(self, result) -> None:
        """The step's loss, learning rate, gradient norm and speed into metrics.jsonl, the trackers and the bar."""
        loss = result.loss
        loss_value = self.finite_loss(result)
        now = time.perf_counter()
        record = {"step": self.state["step"], "loss": loss_value, "simcse_loss": loss.simcse_loss.item(),
                  "lr": self.scheduler.get_last_lr()[0], "anchor_grad_norm": result.anchor_grad_norm().item(),
                  "sentences_per_second": self.window[1] / max(now - self.window[0], 1e-9)}
        record.update({k: v.item() for k, v in loss.stats.items()})
        self._record(record)
        self.bar.update(1, loss=loss_value, best=self.state["best_dev"], sentences_per_s=record["sentences_per_second"])
        self.window = (now, 0)

    def _record(self, record: dict) -> None:
        self.metrics.append(record)
        self.trackers.log(record)

    def finite_loss(self, result) -> float:
        """The step's loss as a float (a host sync); a non-finite one stops the run before anything is saved."""
        value = result.loss.loss.item()
        if not math.isfinite(value):
            raise MixCSEError(f"non-finite loss ({value}) at step {self.state['step']}; lower the learning rate or "
                              f"use precision fp32")
        return value

    def evaluate(self, step: int) -> bool:
        """Score this evaluation's candidates -- the model, and with ``interpolate`` its blends with the start model
        -- on the selector's data; a candidate that beats every earlier one (the start model, step 0, included) is
        kept in best/ unless the guard, asked then, finds it more than ``guard_tolerance`` below the start model.
        Returns True when early stopping says stop."""
        ctx, state = self.ctx, self.state
        with _random_state_kept():  # scoring never moves the dropout masks of the steps that follow
            decided = self._candidates(step) if ctx.is_main else None
        decided = distributed.broadcast_object(decided, ctx)
        self.encoder.train()
        if self.cfg.save_candidates and ctx.is_main:
            self.encoder.save(candidate_path(self.out, step), self.tokenizer, max_seq_length=self.inference_length)
        state.update(decided["state"])
        for record in decided["records"]:
            self._record(record)
        if ctx.is_main:
            for line in decided["lines"]:
                self.bar.write(line)
        patience = self.cfg.early_stopping_patience
        return step > 0 and patience is not None and state["bad_evals"] >= patience

    def _candidates(self, step: int) -> dict:
        """(rank 0) Score every candidate of this evaluation and decide: the new loop state, the metrics records
        and the log lines. A blend's weights are loaded into the model for its scoring (and saving, when it wins),
        then the checkpoint's are put back bit for bit."""
        cfg, state, selector, guard = self.cfg, self.state, self.selector, self.guard
        new = {k: state[k] for k in ("best_dev", "best_step", "best_alpha", "raw_dev", "guard_start", "guard_best")}
        new["candidates"] = list(state["candidates"])
        records, lines, improved, checkpoint = [], [], False, None
        try:
            for alpha in ([1.0] if step == 0 else cfg.blend_weights()):
                if alpha != 1.0:
                    checkpoint = checkpoint or self._weights()
                    self.encoder.load_state_dict(blend(self.start_state, checkpoint, alpha))
                score, extras = self._score(selector, self.inference)
                wins = new["best_step"] is None or better(score, new["best_dev"], selector.greater_is_better)
                # the guard is asked only of a candidate that would be kept (and of the start model)
                guarded = self._score(guard, self.inference)[0] if guard is not None and wins else None
                if step == 0:
                    new.update(raw_dev=score, guard_start=guarded)
                accepted = self._guard_accepts(guarded, new["guard_start"])
                if accepted and wins:
                    new.update(best_dev=score, best_step=step, best_alpha=alpha, guard_best=guarded)
                    improved = True
                    self.save_best()  # the candidate's weights are the model's now
                candidate = {"step": step, "alpha": alpha, "score": score}
                record = {"step": step, selector.name: score, "best_dev": new["best_dev"],
                          "best_step": new["best_step"], **extras}
                if alpha != 1.0:
                    record["alpha"] = alpha
                if guarded is not None:
                    candidate.update(guard=guarded, accepted=accepted)
                    record.update(guard=guarded, guard_accepted=accepted)
                new["candidates"].append(candidate)
                records.append(record)
                lines.append(self._candidate_line(step, alpha, score, guarded, accepted, new))
        finally:
            if checkpoint is not None:
                self.encoder.load_state_dict(checkpoint)
        new["bad_evals"] = 0 if improved else state["bad_evals"] + 1
        return {"state": new, "records": records, "lines": lines}

    def _weights(self) -> dict:
        """A copy of the model's weights, detached from training."""
        return {k: v.detach().clone() for k, v in self.encoder.state_dict().items()}

    def _guard_accepts(self, score: float | None, start: float | None) -> bool:
        """Whether a candidate's guard score is within ``guard_tolerance`` points of the start model's."""
        if score is None or start is None:
            return True
        if self.guard.greater_is_better:
            return score >= start - self.cfg.guard_tolerance - 1e-9
        return score <= start + self.cfg.guard_tolerance + 1e-9

    def _candidate_line(self, step, alpha, score, guarded, accepted, new) -> str:
        name = self.selector.name + (f" of the blend {alpha:g}" if alpha != 1.0 else "")
        what = " (start model)" if step == 0 else f" (best {new['best_dev']:.2f} @ {new['best_step']})"
        line = f"step {step}: {name} {score:.2f}{what}"
        if guarded is not None:
            line += f"; guard {self.guard.name} {guarded:.2f}"
            if not accepted:
                line += f": refused, more than {self.cfg.guard_tolerance:g} below the start's {new['guard_start']:.2f}"
        return line

    def _score(self, evaluator, encoder) -> tuple[float, dict[str, float]]:
        """An evaluator's primary metric and its extras on ``encoder`` (the model as it will be used)."""
        results = evaluator(encoder, batch_size=self.cfg.eval_batch_size)
        return evaluator.primary(results), evaluator.extras(results)

    def _held_out_scores(self, encoder) -> dict[str, dict]:
        """{file name: {metric, value, file}} of the held-out pair files (``test_pairs``)."""
        results = self.held_out(encoder, batch_size=self.cfg.eval_batch_size)
        return {name: {"metric": r["main"], "value": r[r["main"]], "file": r["file"]} for name, r in results.items()}

    def save_best(self) -> None:
        if self.ctx.is_main:
            self.encoder.save(self.out / BEST_DIR, self.tokenizer, max_seq_length=self.inference_length)

    def save(self) -> None:
        """The checkpoint: model, optimiser, schedule, loop state and every rank's random state."""
        rngs = [None] * self.ctx.world_size
        if self.ctx.enabled:
            torch.distributed.all_gather_object(rngs, rng_state())
        else:
            rngs = [rng_state()]
        if self.ctx.is_main:
            save_checkpoint(checkpoint_path(self.out), {
                "model": self.encoder.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler is not None else None,
                "state": dict(self.state), "rng": rngs, "config": self.cfg.to_dict()})

    def _held_out_report(self) -> dict:
        """{file name: {metric, start, best}}: the held-out pair files on the start model and on best/."""
        start = self.state["test_pairs_start"] or {}
        best = start if self.state["best_step"] == 0 and start else self._held_out_scores(
            SentenceEncoder.load(self.out / BEST_DIR, device=str(self.ctx.device)))
        return {name: {"metric": r["metric"], "start": start.get(name, {}).get("value"), "best": r["value"],
                       "file": r["file"]} for name, r in best.items()}

    def finish(self) -> TrainResult:
        """summary.json, the model card and the closing lines (rank 0); the result every rank returns."""
        ctx, state, selector, out = self.ctx, self.state, self.selector, self.out
        summary = {}
        if ctx.is_main:
            if state["best_step"] is None:  # nothing to select on: the final model is the one shipped
                self.save_best()
                state["best_step"] = state["step"]
            summary = {k: state[k] for k in ("raw_dev", "best_dev", "best_step", "train_seconds")}
            summary.update(steps=state["step"], total_steps=self.total_steps, test_pooler=self.encoder.test_pooler,
                           sentences_per_second=state["sentences_seen"] / max(state["train_seconds"], 1e-9),
                           select_metric=selector.name if selector else None,
                           selection=selector.description if selector else None,
                           start_won=selector is not None and state["best_step"] == 0,
                           inference_max_seq_length=self.inference_length)
            if len(self.cfg.blend_weights()) > 1:
                summary["best_alpha"] = state["best_alpha"]
            if self.guard is not None:
                summary["guard"] = self._guard_report()
            if self.guard is not None or len(self.cfg.blend_weights()) > 1:
                summary["candidates"] = state["candidates"]
            if getattr(self, "mined", None):
                summary["mined_positives"] = self.mined
            if self.held_out is not None:
                summary["test_pairs"] = self._held_out_report()
            summary["wall_seconds"] = time.perf_counter() - self.started  # this call's (resumed: since the resume)
            (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
            _write_card(out, self.resolved, summary)
            if summary["start_won"]:
                print(f"note: no checkpoint beat the start model on {selector.name}; best/ is the start model",
                      file=sys.stderr)
            print("done " + json.dumps(summary), flush=True)
        distributed.close(ctx)
        return TrainResult(str(out), state["step"], state["best_step"], state["best_dev"], state["raw_dev"],
                           state["train_seconds"], state["sentences_seen"] / max(state["train_seconds"], 1e-9),
                           selector.name if selector else None, ctx.is_main, summary.get("test_pairs"),
                           summary.get("wall_seconds"), summary.get("guard"), summary.get("best_alpha"))

    def _guard_report(self) -> dict:
        """The guard in summary.json: its metric, data, tolerance, the start's and the shipped model's scores, and
        the candidates it refused."""
        state = self.state
        return {"metric": self.guard.name, "data": self.cfg.guard_data, "description": self.guard.description,
                "tolerance": self.cfg.guard_tolerance, "start": state["guard_start"], "best": state["guard_best"],
                "refused": [{"step": c["step"], "alpha": c["alpha"]} for c in state["candidates"]
                            if c.get("accepted") is False]}


@contextlib.contextmanager
def _random_state_kept():
    """Evaluation leaves the random state as it found it: how often and on how many candidates a run scores never
    changes the dropout masks its training steps draw."""
    state = rng_state()
    try:
        yield
    finally:
        set_rng_state(state)


def _write_card(out: Path, resolved: dict, summary: dict) -> None:
    try:
        from mixcse.evaluation.modelcard import write_model_card
    except ImportError:
        return
    write_model_card(out / BEST_DIR, resolved, summary)
