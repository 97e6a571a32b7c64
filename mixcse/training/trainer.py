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
from mixcse.evaluation.selection import build_guard, build_selector
from mixcse.models.encoder import load_encoder
from mixcse.models.sentence_encoder import SentenceEncoder
from mixcse.training import distributed
from mixcse.training.config import TrainConfig, build_config
from mixcse.training.levers import StartModel, active_levers
from mixcse.training.optim import (  # noqa: F401 (cpu_supports_bf16: the benchmarks read it here)
    build_optimizer,
    cpu_supports_bf16,
    linear_schedule,
    prepare_for_training,
    resolve_precision,
)
from mixcse.training.rundir import (
    BEST_DIR,
    RESUME_SCHEDULE_KEYS,
    MetricsLog,
    candidate_path,
    checkpoint_path,
    claim_folder,
    clear_owned_outputs,
    prepare_output_dir,
    random_state_kept,
    read_resume,
    rng_state,
    save_checkpoint,
    seed_everything,
    set_rng_state,
)
from mixcse.training.selection import CandidateModel, Guard, Selection, initial_state, upgraded
from mixcse.training.step import make_step
from mixcse.training.timeline import Timeline
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
    guards: list | None = None  # [{metric, data, start, best, tolerance, refused}]: the forgetting guards, when set
    best_alpha: float | None = None  # the shipped candidate's weight on its checkpoint (1.0: not a blend)
    seconds: dict | None = None  # where this call's wall time went: {train, select, guard, test, other}
    decision: str | None = None  # one sentence on why best/ is what it is
    levers: dict | None = None  # {lever: its report}: the levers this run used (training/levers/)
    select_label: str | None = None  # the selector's short name for reports ("STS-B dev", "dev pairs AP")
    start_won_hint: str | None = None  # the selector's note when the start model was kept


def train(config: TrainConfig | dict, *, overwrite: bool = False, resume: bool = False,
          progress: bool | None = None) -> TrainResult:
    """Train a sentence encoder as ``config`` says; docs/training.md describes the outputs.

    ``progress``: None shows a bar on a terminal and a plain line every 30 s elsewhere; False is silent."""
    with contextlib.ExitStack() as held:  # the output folder's lock, released however the run ends
        return Run(config, overwrite=overwrite, resume=resume, progress=progress, held=held).train()


class Run:
    """One training run: ``Run(...)`` sets it up (nothing is written before every input is checked), ``train()``
    runs the loop. ``state`` is what a checkpoint keeps of the loop; ``resolved`` is what config.yaml records."""

    def __init__(self, config: TrainConfig | dict, *, overwrite: bool, resume: bool, progress: bool | None,
                 held: contextlib.ExitStack):
        self.timeline = Timeline()
        self.started = self.timeline.started
        setup = self.timeline.phase("other")  # loading and checks; left at the end of setup
        setup.__enter__()
        cfg = self.cfg = config if isinstance(config, TrainConfig) else build_config(dict(config))
        cfg.validate()
        ctx = self.ctx = distributed.init_from_env()
        self.out = Path(cfg.output_dir)
        self.objective = cfg.objective()
        self.precision = resolve_precision(cfg.precision, ctx.device)
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        distributed.check_batch_split(cfg.batch_size, cfg.mini_batch_size, ctx)
        self.resume = prepare_output_dir(self.out, cfg.to_dict(), overwrite=overwrite, resume=resume)
        ckpt, ckpt_stamp, history, changed = (read_resume(self.out, cfg.to_dict(), TrainConfig().to_dict(),
                                                          ctx.is_main) if self.resume else (None, None, [], {}))
        # Fail on bad input before anything is written.
        self.selector, self.no_selection_note = build_selector(
            cfg.select_on, data_dir=cfg.data_dir, select_data=cfg.select_data, select_split=cfg.select_split,
            analysis=cfg.analysis_at_eval, select_docs=cfg.select_docs)
        # held-out pairs: AP, and F1 at the threshold best on the selection pairs when they have 0/1 labels
        dev = self.selector.sets[0].source if isinstance(self.selector, PairsEvaluator) and \
            self.selector.primary_metric == "ap" else None
        self.held_out = PairsEvaluator(cfg.test_pairs, threshold_from=dev) if cfg.test_pairs and ctx.is_main else None
        self.guards = [Guard(build_guard(data, data_dir=cfg.data_dir), data, tolerance)
                       for data, tolerance in cfg.guard_list()]
        if self.guards and self.selector is None:
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
        self.selection = None if self.selector is None else Selection(
            self.selector, self.guards, blend_weights=cfg.blend_weights(), search=cfg.interpolate != "none",
            patience=cfg.early_stopping_patience)
        self.state = {"step": 0, **initial_state(), "train_seconds": 0.0, "sentences_seen": 0,
                      "test_pairs_start": None}
        self.resolved = {
            "config": cfg.to_dict(), "objective": vars(self.objective) | {}, "precision": self.precision,
            "world_size": ctx.world_size, "total_steps": self.total_steps,
            "steps_per_epoch": self.plan.steps_per_epoch, "torch_threads": torch.get_num_threads(),
            "device": str(ctx.device), "selection": self.selector.description if self.selector else None,
            "guard": [g.evaluator.description for g in self.guards] or None,
            "inference_max_seq_length": self.inference_length}
        if self.resume:
            self._restore(ckpt, changed)
            if changed:
                history.append({"step": self.state["step"], "changed": changed})
        if history:
            self.resolved["history"] = history  # config keys changed on --resume: at which step, from what to what
        refusal = None
        if ctx.is_main:  # one run at a time writes a folder: its lock, and the folder checked again under it
            refusal = claim_folder(held, self.out, cfg.to_dict(), resumed=self.resume, overwrite=overwrite,
                                   resume_asked=resume, ckpt_stamp=ckpt_stamp)
        if (refusal := distributed.broadcast_object(refusal, ctx)) is not None:  # every rank stops on a refusal
            raise MixCSEError(refusal)
        self._open_outputs(changed, progress)
        setup.__exit__(None, None, None)

    # ------------------------------------------------------------------------------------------------ setup
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
        needs_start = len(cfg.blend_weights()) > 1 or (cfg.guard_data is not None and cfg.interpolate != "none")
        self.start_state = self._weights() if needs_start else None
        pairs = self._prepare_levers(corpus_loader)
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

    def _prepare_levers(self, corpus_loader) -> list | None:
        """The run's levers (training/levers/), prepared from the start model and the corpus; the second views
        one of them gives, or None."""
        self.levers = active_levers(self.cfg)
        start = StartModel(self.cfg, self.encoder, self.tokenizer, corpus_loader, self.ctx.device, self.ctx.is_main)
        for lever in self.levers:
            lever.prepare(start)
        start.print_notes()
        return next((pairs for lever in self.levers if (pairs := lever.pairs()) is not None), None)

    def signals(self, indices) -> dict | None:
        """The levers' tensors for the loss of one global batch; None when no lever gives any."""
        signals = {}
        for lever in self.levers:
            if lever.has("signals"):
                signals.update(lever.signals(indices))
        return signals or None

    def batch(self, indices, step: int) -> dict:
        """This rank's share of global batch ``step``, as the levers' views change it."""
        batch = self.corpus.batch(indices)
        for lever in self.levers:
            if lever.has("view"):
                batch = lever.view(batch, indices, step)
        return batch

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
        self.state.update(upgraded(self.state))  # a checkpoint of one guard's layout
        rngs = ckpt["rng"] if isinstance(ckpt["rng"], list) else [ckpt["rng"]]
        if len(rngs) != self.ctx.world_size:  # another split of the global batch: not the run that was checkpointed
            raise ConfigError(f"--resume: the checkpoint was written by {len(rngs)} process(es), this run has "
                              f"{self.ctx.world_size}; resume with the same number of processes")
        set_rng_state(rngs[self.ctx.rank])

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
        self.show_progress = ctx.is_main and progress is not False
        self.bar = None  # the training bar, from the first training step on (after the start model's scoring)

    # ------------------------------------------------------------------------------------------------ the loop
    def train(self) -> TrainResult:
        cfg, ctx, state, selector, timeline = self.cfg, self.ctx, self.state, self.selector, self.timeline
        self.encoder.train()
        if state["step"] == 0:
            self._score_start_model()
        self.bar = Progress(self.total_steps, "train", "steps", initial=state["step"], enabled=self.show_progress,
                            eta=self._eta)
        local = slice(ctx.rank * cfg.batch_size // ctx.world_size, (ctx.rank + 1) * cfg.batch_size // ctx.world_size)
        self.window = (time.perf_counter(), 0)  # (start, sentences) of the sentences/s window
        patience = cfg.early_stopping_patience
        stop = selector is not None and patience is not None and state["step"] > 0 and state["bad_evals"] >= patience
        train_step = make_step(cfg, ctx, self.model, self.optimizer, self.objective, self.scaler,
                               precision=self.precision, levers=self.levers)
        save_steps = cfg.save_steps or cfg.eval_steps
        while state["step"] < self.total_steps and not stop:
            with timeline.phase("train"):
                indices = self.plan.indices(state["step"])
                result = self.step(train_step, self.batch(indices[local], state["step"]), self.signals(indices))
                step = state["step"]
                if step % cfg.log_steps == 0 or step == self.total_steps:  # the only host syncs of the loop
                    self.log(result)
                else:
                    self.bar.update(1)
            if self._evaluates_at(step):
                stop = self.evaluate(step)
            if step % save_steps == 0 or step == self.total_steps or stop or state["best_step"] == step:
                self.finite_loss(result)  # between log steps too: a diverged model never replaces the checkpoint
                with timeline.phase("other"):
                    self.save()  # also when best/ changed, so that a resumed run's record always matches best/
        self.bar.close()
        self.trackers.close()
        return self.finish()

    def _score_start_model(self) -> None:
        """The start model on the selection data (it is a candidate: a run never ships a model worse than its start),
        the guard and the held-out pairs, before the first step; one line with the seconds each took."""
        state, timeline, before = self.state, self.timeline, dict(self.timeline.seconds)
        if self.selector is not None:
            self.evaluate(0)
        if self.held_out is not None:
            with random_state_kept():
                state["test_pairs_start"] = self._held_out_scores(self.inference)
            self.encoder.train()
        took = {name: timeline.seconds[name] - before[name] for name in ("select", "guard", "test")}
        if self.ctx.is_main and any(took.values()):
            print("start model scored in " + ", ".join(f"{name} {sec:.1f}s" for name, sec in took.items() if sec)
                  + "; training starts", flush=True)

    def _evaluates_at(self, step: int) -> bool:
        return self.selector is not None and (step % self.cfg.eval_steps == 0 or step == self.total_steps)

    def _eta(self) -> float | None:
        """The training bar's ETA: steps, the scorings of the evaluations still to come, the held-out pairs."""
        step, total, every = self.state["step"], self.total_steps, self.cfg.eval_steps
        evals = 0  # the evaluations from this step (whose evaluation follows the bar's update) to the last
        if self.selector is not None:
            evals = total // every - (step - 1) // every + (total % every != 0)
        return self.timeline.eta(steps_left=total - step, scorings_left=evals * len(self.cfg.blend_weights()),
                                 tests_left=int(self.held_out is not None), guards=len(self.guards))

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
        """One evaluation: the selection room (training/selection.py) scores this step's candidates and decides
        what best/ holds. Returns True when early stopping says stop."""
        ctx, state = self.ctx, self.state
        with random_state_kept():  # scoring never moves the dropout masks of the steps that follow
            decided = None
            if ctx.is_main:
                model = CandidateModel(self.encoder, self.start_state,
                                       lambda evaluator, phase: self._score(evaluator, self.inference, phase),
                                       self.save_best)
                try:
                    decided = self.selection.evaluate(step, model, state)
                except MixCSEError as exc:  # every rank stops with it, none waits for the broadcast
                    decided = {"error": exc}
        decided = distributed.broadcast_object(decided, ctx)
        if "error" in decided:
            raise decided["error"]
        self.encoder.train()
        if self.cfg.save_candidates and ctx.is_main:
            with self.timeline.phase("other"):
                self.encoder.save(candidate_path(self.out, step), self.tokenizer,
                                  max_seq_length=self.inference_length)
        state.update(decided["state"])
        for record in decided["records"]:
            self._record(record)
        if ctx.is_main:
            for line in decided["lines"]:
                if self.bar is not None:
                    self.bar.write(line)
                else:
                    print(line, flush=True)
        return decided["stop"]

    def _weights(self) -> dict:
        """A copy of the model's weights, detached from training."""
        return {k: v.detach().clone() for k, v in self.encoder.state_dict().items()}

    def _score(self, evaluator, encoder, phase: str) -> tuple[float, dict[str, float]]:
        """An evaluator's primary metric and its extras on ``encoder`` (the model as it will be used)."""
        with self.timeline.phase(phase):
            results = evaluator(encoder, batch_size=self.cfg.eval_batch_size)
        return evaluator.primary(results), evaluator.extras(results)

    def _held_out_scores(self, encoder) -> dict[str, dict]:
        """{file name: {metric, value, file, f1}} of the held-out pair files (``test_pairs``); ``f1``: at the
        threshold best on the selection pairs (None without one)."""
        with self.timeline.phase("test"):
            results = self.held_out(encoder, batch_size=self.cfg.eval_batch_size)
        return {name: {"metric": r["main"], "value": r[r["main"]], "file": r["file"],
                       "f1": r.get("f1_dev_threshold")} for name, r in results.items()}

    def save_best(self) -> None:
        if self.ctx.is_main:
            with self.timeline.phase("other"):
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
        """{file name: {metric, start, best, file}}: the held-out pair files on the start model and on best/; with
        0/1 selection pairs also ``f1_start`` / ``f1_best`` at the threshold best on them (``f1_threshold_from``)."""
        start = self.state["test_pairs_start"] or {}
        best = start if self.state["best_step"] == 0 and start else self._held_out_scores(
            SentenceEncoder.load(self.out / BEST_DIR, device=str(self.ctx.device)))
        report = {}
        for name, r in best.items():
            report[name] = {"metric": r["metric"], "start": start.get(name, {}).get("value"), "best": r["value"],
                            "file": r["file"]}
            if r.get("f1") is not None:
                report[name].update(f1_start=start.get(name, {}).get("f1"), f1_best=r["f1"],
                                    f1_threshold_from=self.held_out.dev.source)
        return report

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
                           select_label=selector.label if selector else None,
                           selection=selector.description if selector else None,
                           start_won=selector is not None and state["best_step"] == 0,
                           inference_max_seq_length=self.inference_length)
            if self.selection is not None:
                summary.update(self.selection.report(state))
            if summary["start_won"] and selector.start_won_hint:
                summary["start_won_hint"] = selector.start_won_hint
            levers = {lever.name: report for lever in self.levers if (report := lever.report()) is not None}
            if levers:
                summary["levers"] = levers
            if self.held_out is not None:
                summary["test_pairs"] = self._held_out_report()
            # this call's (resumed: since the resume), and where it went
            summary["wall_seconds"] = self.timeline.wall()
            summary["seconds"] = self.timeline.breakdown()
            if self.selection is not None and self.selection.plot(out / BEST_DIR / "frontier.png", state):
                summary["frontier_plot"] = f"{BEST_DIR}/frontier.png"
            (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
            _write_card(out, self.resolved, summary)
            if self.selection is not None:
                print("\n".join(["candidates scored (the frontier):", *self.selection.frontier_lines(state),
                                 f"decision: {summary['decision']}"]), flush=True)
            print(self.timeline.line(summary["wall_seconds"]), flush=True)
            print("done " + json.dumps(summary), flush=True)
        distributed.close(ctx)
        return TrainResult(str(out), state["step"], state["best_step"], state["best_dev"], state["raw_dev"],
                           state["train_seconds"], state["sentences_seen"] / max(state["train_seconds"], 1e-9),
                           selector.name if selector else None, ctx.is_main, summary.get("test_pairs"),
                           summary.get("wall_seconds"), summary.get("guards"), summary.get("best_alpha"),
                           summary.get("seconds"), summary.get("decision"), summary.get("levers"),
                           summary.get("select_label"), summary.get("start_won_hint"))


def _write_card(out: Path, resolved: dict, summary: dict) -> None:
    try:
        from mixcse.evaluation.modelcard import write_model_card
    except ImportError:
        return
    write_model_card(out / BEST_DIR, resolved, summary)
