"""Where the time of a mixcse training step goes.

Replays the hot loop of ``mixcse.training.trainer.train`` (same objects: ``BatchPlan``, ``TokenizedCorpus``,
``load_encoder``, the trainer's step from ``mixcse.training.step.make_step``, AdamW over ``optimizer_groups``, LambdaLR, the
logging step's host syncs) on the CPU recipe (recipes/cpu/mixcse-mini.yaml: stand-in backbone,
cls pooler + MLP head, batch 64, length 32), with a wall-clock stamp between phases. Per phase: median ms per step
over the measured steps, and its share of the median step. Tokenisation happens once before the loop
(``TokenizedCorpus``); it is shown amortised per step, and so is the logging of every ``log_steps``-th step.

Also measured, interleaved, outside the table: torch's default AdamW (for-each) against ``fused=True`` (what the
trainer uses) on the same parameters and gradients.

    python benchmarks/profile_step.py                 # 30 measured steps (~4 min on 2 busy cores)
    python benchmarks/profile_step.py --quick         # 6 steps
    python benchmarks/profile_step.py --ops           # + torch.profiler top operators of one step
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
import torch
import yaml

from benchmarks import common  # noqa: F401
from benchmarks.common import (
    CORPUS,
    REPO,
    STAND_IN,
    interleaved,
    model_setup,
    paired_ratios,
    read_corpus,
    summarise,
    write_result,
)

PHASES = ["tokenisation (amortised)", "collation (pad + 2 views)", "forward", "loss", "backward", "grad clip",
          "optimizer step (AdamW)", "scheduler + zero_grad", "logging (amortised)", "progress/bookkeeping"]


def build(threads: int, steps: int, precision: str = "fp32"):
    from mixcse.data.loader import BatchPlan
    from mixcse.data.memory import TokenizedCorpus
    from mixcse.training import distributed
    from mixcse.training.config import build_config
    from mixcse.training.step import make_step
    from mixcse.training.trainer import linear_schedule, resolve_precision

    recipe = yaml.safe_load((REPO / "recipes/cpu/mixcse-mini.yaml").read_text())
    recipe.update(model=str(STAND_IN), train_file=str(CORPUS), num_threads=threads, precision=precision)
    cfg = build_config(recipe)
    ctx = distributed.init_from_env()
    sentences = read_corpus(steps * cfg.batch_size)  # the first lines of the corpus: what a run would tokenise
    plan = BatchPlan(len(sentences), cfg.batch_size, cfg.seed)
    encoder, tokenizer, optimizer = model_setup(cfg, ctx, cfg.num_threads, cfg.seed)
    t0 = time.perf_counter()
    corpus = TokenizedCorpus(sentences, tokenizer, cfg.max_seq_length, plan.used_indices(steps))
    tokenise_s = time.perf_counter() - t0
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(steps, 0))
    step = make_step(cfg, ctx, encoder, optimizer, precision=resolve_precision(cfg.precision, ctx.device))
    return cfg, plan, corpus, encoder, optimizer, scheduler, step, tokenise_s


def profile_loop(steps: int, warmup: int, threads: int, ops: bool) -> dict:
    total = steps + warmup
    cfg, plan, corpus, encoder, optimizer, scheduler, train_step, tokenise_s = build(threads, total)
    local = slice(0, cfg.batch_size)
    per_step: list[dict[str, float]] = []
    log_times: list[float] = []
    window_sentences, window_start = 0, time.perf_counter()
    for step in range(total):
        stamps = [time.perf_counter()]
        batch = corpus.batch(plan.indices(step)[local])
        logging_step = (step + 1) % cfg.log_steps == 0 or step + 1 == total
        stamps.append(time.perf_counter())
        # the shared step, stamped after each phase: forward, loss, backward, clip, optimizer, zero_grad (the step
        # concatenates the two views itself: that copy of the token ids is timed with the forward)
        result = train_step(batch, mark=lambda phase: stamps.append(time.perf_counter()))
        scheduler.step()
        stamps.append(time.perf_counter())
        window_sentences += cfg.batch_size
        t_log = 0.0
        if logging_step:  # what the trainer does on a logging step (json line built, not written)
            t = time.perf_counter()
            out_loss = result.loss
            loss_value = out_loss.loss.item()
            assert math.isfinite(loss_value)
            now = time.perf_counter()
            record = {"step": step + 1, "loss": loss_value, "simcse_loss": out_loss.simcse_loss.item(),
                      "lr": scheduler.get_last_lr()[0], "anchor_grad_norm": result.anchor_grad_norm().item(),
                      "sentences_per_second": window_sentences / max(now - window_start, 1e-9)}
            record.update({k: v.item() for k, v in out_loss.stats.items()})
            json.dumps(record)
            window_start, window_sentences = now, 0
            t_log = time.perf_counter() - t
            if step >= warmup:
                log_times.append(t_log)
        stamps.append(time.perf_counter())
        if step >= warmup:
            d = np.diff(stamps)
            per_step.append({"collation (pad + 2 views)": d[0], "forward": d[1], "loss": d[2], "backward": d[3],
                             "grad clip": d[4], "optimizer step (AdamW)": d[5], "scheduler + zero_grad": d[6] + d[7],
                             "progress/bookkeeping": d[8] - t_log, "_logging_step": logging_step})
        print(f"  step {step + 1}/{total}: {stamps[-1] - stamps[0]:.3f} s{' (warm-up)' if step < warmup else ''}",
              flush=True)

    rows = {}
    for phase in PHASES:
        if phase == "tokenisation (amortised)":
            values = [tokenise_s / total]
        elif phase == "logging (amortised)":
            values = [sum(log_times) / max(1, len(per_step))]
        else:
            values = [s[phase] for s in per_step]
        rows[phase] = summarise(values)
    step_totals = [sum(v for k, v in s.items() if not k.startswith("_")) for s in per_step]
    result = {"steps": len(per_step), "warmup_steps": warmup, "threads": threads, "log_steps": cfg.log_steps,
              "phases_ms": {k: v["median"] * 1e3 for k, v in rows.items()}, "phases": rows,
              "step_total_s": summarise(step_totals),
              "backward_logging_vs_other_steps_s": {
                  "logging": summarise([s["backward"] for s in per_step if s["_logging_step"]] or [float("nan")]),
                  "other": summarise([s["backward"] for s in per_step if not s["_logging_step"]] or [float("nan")])}}

    if ops:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            train_step(corpus.batch(plan.indices(0)[local]))
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20)
        print(table)
        result["top_ops"] = table
    result["adamw"] = adamw_comparison(encoder, cfg, rounds=3 if len(per_step) < 10 else 10)
    return result


def adamw_comparison(encoder, cfg, rounds: int) -> dict:
    """torch's default AdamW (for-each) vs fused=True (the trainer's): same parameters, gradients, groups."""
    from mixcse.training.trainer import optimizer_groups

    params = [p for p in encoder.parameters() if p.requires_grad]
    copies = {}
    for name, kw in (("default", {}), ("fused", {"fused": True})):
        clone = {p: torch.nn.Parameter(p.detach().clone()) for p in params}
        for p, c in clone.items():
            c.grad = torch.randn_like(c) * 1e-3
        groups = optimizer_groups(encoder, cfg.weight_decay)
        groups = [{**g, "params": [clone[p] for p in g["params"]]} for g in groups]
        copies[name] = (torch.optim.AdamW(groups, lr=cfg.learning_rate, **kw), list(clone.values()))
    for name in copies:  # same starting point, then one identical step to compare bitwise
        for c, p in zip(copies[name][1], params):
            c.data.copy_(p.detach())
    torch.manual_seed(0)
    grads = [torch.randn_like(p) * 1e-3 for p in params]
    for name in copies:
        for c, g in zip(copies[name][1], grads):
            c.grad = g.clone()
        copies[name][0].step()
    max_diff = max((a - b).abs().max().item() for a, b in zip(copies["default"][1], copies["fused"][1]))
    times = interleaved({name: copies[name][0].step for name in copies}, repeats=rounds, warmup=1)
    return {"default_s": summarise(times["default"]), "fused_s": summarise(times["fused"]),
            "speedup_fused": summarise(paired_ratios(times["default"], times["fused"])),
            "bit_identical": max_diff == 0.0, "max_abs_param_diff_after_one_step": max_diff,
            "n_params": sum(p.numel() for p in params)}


def print_table(result: dict) -> None:
    total = sum(result["phases_ms"].values())
    print(f"\nmixcse training step, CPU recipe (batch 64 x 2 views, length 32, {result['threads']} threads), "
          f"median of {result['steps']} steps:")
    print(f"  {'phase':32s} {'ms/step':>9s} {'share':>7s}")
    for phase, ms in result["phases_ms"].items():
        print(f"  {phase:32s} {ms:9.1f} {ms / total:7.1%}")
    print(f"  {'sum of medians':32s} {total:9.1f}")
    st = result["step_total_s"]
    print(f"  (median step {st['median'] * 1e3:.0f} ms, IQR {st['q1'] * 1e3:.0f}-{st['q3'] * 1e3:.0f})")
    a = result["adamw"]
    print(f"AdamW step: default (for-loop) {a['default_s']['median'] * 1e3:.0f} ms vs fused "
          f"{a['fused_s']['median'] * 1e3:.0f} ms (x{a['speedup_fused']['median']:.1f}); bit-identical: "
          f"{a['bit_identical']} (max |diff| after one step {a['max_abs_param_diff_after_one_step']:.1e})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ops", action="store_true", help="also print torch.profiler's top operators of one step")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    steps = args.steps or (6 if args.quick else 30)
    result = profile_loop(steps, warmup=2, threads=args.threads, ops=args.ops)
    print_table(result)
    if not args.no_write:
        write_result("profile_step", {"mode": "quick" if args.quick else "default", **result})


if __name__ == "__main__":
    main()
