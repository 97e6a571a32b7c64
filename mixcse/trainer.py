"""The training loop: plain PyTorch, one obvious path, resumable bit for bit."""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml

from . import distributed
from .config import TrainConfig, build_config
from .data import BatchPlan, TokenizedCorpus
from .documents import describe, read_training_text
from .encoder import SentenceEncoder
from .errors import ConfigError, MixCSEError
from .fast_dropout import use_fast_dropout
from .losses import contrastive_loss
from .model import load_encoder

CHECKPOINT_DIR = "checkpoint"
BEST_DIR = "best"
OWNED_OUTPUTS = (CHECKPOINT_DIR, BEST_DIR, "metrics.jsonl", "config.yaml", "summary.json", "README.md")


@dataclass
class TrainResult:
    output_dir: str
    steps: int
    best_step: int | None
    best_dev: float | None
    raw_dev: float | None
    train_seconds: float
    sentences_per_second: float


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
    return precision


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


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


def atomic_torch_save(obj, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def check_output_dir(out: Path, *, overwrite: bool, resume: bool) -> None:
    if resume:
        if not (out / CHECKPOINT_DIR / "state.pt").exists():
            raise MixCSEError(f"--resume: no checkpoint in {out / CHECKPOINT_DIR}")
        return
    if out.exists() and not out.is_dir():
        raise MixCSEError(f"output_dir exists and is not a directory: {out}")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise MixCSEError(f"output_dir {out} is not empty; pass --overwrite to replace it or --resume to continue")


def optimizer_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """No decay on biases and norm weights (the convention of BERT fine-tuning)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if p.ndim < 2 or "norm" in name.lower() else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def prepare_for_training(encoder: torch.nn.Module, cfg: TrainConfig, device: torch.device) -> None:
    """Move to the device; on CPU, numpy-drawn dropout masks (``fast_cpu_dropout``, see mixcse/fast_dropout.py)."""
    encoder.to(device)
    if cfg.fast_cpu_dropout and device.type == "cpu":
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


class DevEvaluator:
    """STS-B dev Spearman with the test-time pooler; absent data means no evaluation (best = last).

    With ``analysis`` it also returns the paper's embedding-space figures on the same embeddings: alignment,
    uniformity and the pairwise angles of STS-B dev (mixcse.evaluation.analysis).
    """

    def __init__(self, data_dir: str | None, batch_size: int, analysis: bool = False):
        from .evaluation import resolve_data_dir, stsb_dev_spearman

        try:  # accepts the downstream/ folder or its parent, as `mixcse data download` lays it out
            self.data_dir = str(resolve_data_dir(data_dir))
        except MixCSEError:
            self.data_dir = None
        self._score = stsb_dev_spearman
        self.batch_size = batch_size
        self.analysis = analysis
        self.available = bool(self.data_dir) and (Path(self.data_dir) / "STS/STSBenchmark/sts-dev.csv").exists()

    def __call__(self, encoder, tokenizer) -> tuple[float | None, dict]:
        if not self.available:
            return None, {}
        inference = SentenceEncoder(encoder, tokenizer, device=next(encoder.parameters()).device)
        cache: dict[str, np.ndarray] = {}

        def embed(sentences: list[str]) -> np.ndarray:
            missing = [s for s in dict.fromkeys(sentences) if s not in cache]
            if missing:
                cache.update(zip(missing, inference.encode(missing, batch_size=self.batch_size)))
            return np.stack([cache[s] for s in sentences]) if sentences else np.zeros((0, encoder.hidden_size))

        score = float(self._score(embed, self.data_dir, batch_size=self.batch_size))
        extra = {}
        if self.analysis:
            from .evaluation.analysis import analyse
            from .evaluation.data import load_stsb

            stats = analyse({"dev": load_stsb(Path(self.data_dir), "dev")}, embed)
            extra = {k: stats[k] for k in ("alignment", "uniformity", "max_angle", "mean_angle")}
        return score, extra


def train(config: TrainConfig | dict, *, overwrite: bool = False, resume: bool = False,
          progress: bool | None = None) -> TrainResult:
    """Train a sentence encoder as ``config`` says; see README for the outputs."""
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

    check_output_dir(out, overwrite=overwrite, resume=resume)
    if resume:  # the run continues under the config it started with, except for explicitly changed keys
        saved = yaml.safe_load((out / "config.yaml").read_text())["config"]
        if saved != cfg.to_dict() and ctx.is_main:
            changed = sorted(k for k in saved if saved[k] != cfg.to_dict().get(k))
            print(f"note: resuming with changed config keys: {', '.join(changed)}", file=sys.stderr)
    # Fail on bad input before anything is written.
    sentences, text_stats = read_training_text(cfg)
    plan = BatchPlan(len(sentences), cfg.batch_size, cfg.seed)
    total_steps = cfg.max_steps or plan.steps_per_epoch * cfg.epochs
    seed_everything(cfg.seed)
    encoder, tokenizer, _ = load_encoder(cfg.model, pooler=cfg.pooler, mlp_only_train=cfg.mlp_only_train,
                                         trust_remote_code=cfg.trust_remote_code)
    prepare_for_training(encoder, cfg, ctx.device)
    if ctx.rank:  # every rank starts from the same weights, but draws its own dropout masks (rank 0 keeps `seed`)
        seed_everything(int(np.random.SeedSequence([cfg.seed, ctx.rank]).generate_state(1)[0]))
    corpus = TokenizedCorpus(sentences, tokenizer, cfg.max_seq_length, plan.used_indices(total_steps))
    del sentences
    if ctx.is_main:
        print(describe(text_stats, corpus.stats), flush=True)

    optimizer = build_optimizer(encoder, cfg, ctx.device)
    buckets = cfg.forward_buckets(ctx.device.type)
    warmup = int(cfg.warmup_ratio * total_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(total_steps, warmup))
    scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    model = encoder
    if ctx.enabled:
        device_ids = [ctx.local_rank] if ctx.device.type == "cuda" else None
        # The backbone's own pooler layer (BERT) is never used: let DDP skip it.
        model = torch.nn.parallel.DistributedDataParallel(encoder, device_ids=device_ids,
                                                          find_unused_parameters=True)
    evaluator = DevEvaluator(cfg.data_dir, cfg.eval_batch_size, analysis=cfg.analysis_at_eval)
    save_steps = cfg.save_steps or cfg.eval_steps

    state = {"step": 0, "best_dev": None, "best_step": None, "raw_dev": None, "bad_evals": 0,
             "train_seconds": 0.0, "sentences_seen": 0}
    resolved = {"config": cfg.to_dict(), "objective": vars(objective) | {}, "precision": precision,
                "world_size": ctx.world_size, "total_steps": total_steps, "steps_per_epoch": plan.steps_per_epoch,
                "torch_threads": torch.get_num_threads(), "device": str(ctx.device)}
    if resume:
        ckpt = torch.load(out / CHECKPOINT_DIR / "state.pt", map_location=ctx.device, weights_only=False)
        encoder.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        if scaler is not None and ckpt.get("scaler"):
            scaler.load_state_dict(ckpt["scaler"])
        state.update(ckpt["state"])
        set_rng_state(ckpt["rng"][ctx.rank] if isinstance(ckpt["rng"], list) else ckpt["rng"])
    if ctx.is_main:
        print("mixcse train " + json.dumps(resolved, default=str), flush=True)
        if not resume:
            if overwrite and out.exists():
                for name in OWNED_OUTPUTS:
                    target = out / name
                    shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
            out.mkdir(parents=True, exist_ok=True)
            (out / "config.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    distributed.barrier(ctx)

    metrics_path = out / "metrics.jsonl"
    if ctx.is_main and resume and metrics_path.exists():
        # Drop what a killed run logged after its last checkpoint: the resumed run logs those steps again.
        kept = [line for line in metrics_path.read_text().splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= state["step"]]
        metrics_path.write_text("".join(line + "\n" for line in kept))

    def log(record: dict) -> None:
        if ctx.is_main:
            with open(metrics_path, "a") as fh:
                fh.write(json.dumps(record) + "\n")

    def save_best(step: int) -> None:
        if ctx.is_main:
            encoder.save(out / BEST_DIR, tokenizer, max_seq_length=None)

    def save_checkpoint() -> None:
        rngs = [None] * ctx.world_size
        if ctx.enabled:
            torch.distributed.all_gather_object(rngs, rng_state())
        else:
            rngs = [rng_state()]
        if ctx.is_main:
            (out / CHECKPOINT_DIR).mkdir(exist_ok=True)
            atomic_torch_save({"model": encoder.state_dict(), "optimizer": optimizer.state_dict(),
                               "scheduler": scheduler.state_dict(),
                               "scaler": scaler.state_dict() if scaler is not None else None,
                               "state": dict(state), "rng": rngs, "config": cfg.to_dict()},
                              out / CHECKPOINT_DIR / "state.pt")

    def evaluate_and_select(step: int) -> bool:
        """Returns True when early stopping says stop."""
        score, extra = evaluator(encoder, tokenizer) if ctx.is_main else (None, {})
        score = distributed.broadcast_object(score, ctx)
        encoder.train()
        if score is None:
            return False
        # A NaN score (e.g. constant embeddings) never wins against a real one.
        rank_of = lambda x: -math.inf if x is None or math.isnan(x) else x  # noqa: E731
        improved = state["best_step"] is None or rank_of(score) > rank_of(state["best_dev"])
        if improved:
            state.update(best_dev=score, best_step=step, bad_evals=0)
            save_best(step)
        else:
            state["bad_evals"] += 1
        log({"step": step, "stsb_dev": score, "best_dev": state["best_dev"], "best_step": state["best_step"], **extra})
        if ctx.is_main:
            print(f"step {step}: STS-B dev {score:.2f} (best {state['best_dev']:.2f} @ {state['best_step']})",
                  flush=True)
        patience = cfg.early_stopping_patience
        return patience is not None and state["bad_evals"] >= patience

    encoder.train()
    if state["step"] == 0 and cfg.eval_at_start and evaluator.available:
        state["raw_dev"], extra = evaluator(encoder, tokenizer) if ctx.is_main else (None, {})
        state["raw_dev"] = distributed.broadcast_object(state["raw_dev"], ctx)
        encoder.train()
        log({"step": 0, "stsb_dev": state["raw_dev"], **extra})
        if ctx.is_main:
            print(f"step 0: STS-B dev {state['raw_dev']:.2f} (raw model)", flush=True)

    show = ctx.is_main and (progress if progress is not None else sys.stderr.isatty())
    from tqdm.auto import tqdm

    bar = tqdm(total=total_steps, initial=state["step"], disable=not show, desc="train", unit="step")
    local = slice(ctx.rank * cfg.batch_size // ctx.world_size, (ctx.rank + 1) * cfg.batch_size // ctx.world_size)
    window_start, window_sentences = time.perf_counter(), 0
    stop = False
    while state["step"] < total_steps and not stop:
        step = state["step"]
        t0 = time.perf_counter()
        batch = corpus.batch(plan.indices(step)[local])
        batch = {k: torch.cat([v, v]).to(ctx.device, non_blocking=True) for k, v in batch.items()}  # two views
        n = batch["input_ids"].shape[0] // 2
        logging_step = (step + 1) % cfg.log_steps == 0 or step + 1 == total_steps
        with torch.autocast(ctx.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            pooled = model(batch, length_buckets=buckets)
        if logging_step:
            pooled.retain_grad()
        z1 = distributed.gather_with_local_grad(pooled[:n], ctx)
        z2 = distributed.gather_with_local_grad(pooled[n:], ctx)
        out_loss = contrastive_loss(z1, z2, objective)
        loss = out_loss.loss * ctx.world_size  # DDP averages gradients; the local slice's gradient is complete
        (scaler.scale(loss) if scaler is not None else loss).backward()
        if scaler is not None:
            scaler.unscale_(optimizer)
        if cfg.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(encoder.parameters(), cfg.max_grad_norm)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        state["step"] = step = step + 1
        state["sentences_seen"] += cfg.batch_size
        state["train_seconds"] += time.perf_counter() - t0
        window_sentences += cfg.batch_size
        bar.update(1)

        if logging_step:  # the only host syncs of the loop
            loss_value = out_loss.loss.item()
            if not math.isfinite(loss_value):
                raise MixCSEError(f"non-finite loss ({loss_value}) at step {step}; lower the learning rate or "
                                  f"use precision fp32")
            now = time.perf_counter()
            record = {"step": step, "loss": loss_value, "simcse_loss": out_loss.simcse_loss.item(),
                      "lr": scheduler.get_last_lr()[0],
                      "anchor_grad_norm": pooled.grad.float().norm(dim=-1).mean().item() * n,
                      "sentences_per_second": window_sentences / max(now - window_start, 1e-9)}
            record.update({k: v.item() for k, v in out_loss.stats.items()})
            log(record)
            bar.set_postfix(loss=f"{loss_value:.4g}", dev=state["best_dev"],
                            sps=f"{record['sentences_per_second']:.0f}")
            window_start, window_sentences = now, 0
        if step % cfg.eval_steps == 0 or step == total_steps:
            stop = evaluate_and_select(step)
        if step % save_steps == 0 or step == total_steps or stop:
            save_checkpoint()
    bar.close()

    if ctx.is_main:
        if state["best_step"] is None:  # no dev data: the final model is the one shipped
            save_best(state["step"])
            state["best_step"] = state["step"]
        summary = {k: state[k] for k in ("raw_dev", "best_dev", "best_step", "train_seconds")}
        summary.update(steps=state["step"], total_steps=total_steps, test_pooler=encoder.test_pooler,
                       sentences_per_second=state["sentences_seen"] / max(state["train_seconds"], 1e-9))
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        _write_card(out, resolved, summary)
        print("done " + json.dumps(summary), flush=True)
    distributed.barrier(ctx)
    return TrainResult(str(out), state["step"], state["best_step"], state["best_dev"], state["raw_dev"],
                       state["train_seconds"], state["sentences_seen"] / max(state["train_seconds"], 1e-9))


def _write_card(out: Path, resolved: dict, summary: dict) -> None:
    try:
        from .modelcard import write_model_card
    except ImportError:
        return
    write_model_card(out / BEST_DIR, resolved, summary)
