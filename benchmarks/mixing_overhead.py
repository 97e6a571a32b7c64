"""Does mixing cost anything?

Part 1, training step: one process, the stand-in backbone with the recipe's pooler (cls + MLP head), one batch of
64 corpus sentences (max length 32, two dropout views = 128 rows), 2 threads. A SimCSE step and a MixCSE step
(``mixcse.training.step``'s, without clipping: forward + loss + backward + AdamW step + zero_grad) alternate on the same
model, optimizer and batch; the figure is the median over rounds of the per-round time ratio MixCSE / SimCSE
(target <= 1.05).

Part 2, the loss alone at N = 64 ... 1024, d = 768, forward + backward: ``mixcse.losses.contrastive_loss`` with the
``mixcse`` preset (closed-form mixed logits, N x N matrices only) against ``materialised_mixcse_loss``
(tests/reference.py), which builds the N x N x d mixtures explicitly. Both compute the same loss (checked here
against the closed form in float64: both fp32 results within rounding, and the two implementations equal to 1e-10 in
float64 for N <= 256).
Time is interleaved; peak memory is the high-water mark of torch's CPU allocator during forward + backward, read
from torch.profiler's memory events (``benchmarks/common.py: peak_cpu_bytes``; self-tested on known allocations).

    python benchmarks/mixing_overhead.py            # ~10 min on 2 busy cores
    python benchmarks/mixing_overhead.py --quick    # ~1 min: 2 step rounds, N = 1024 memory only
"""

from __future__ import annotations

import argparse
import time

import torch

from benchmarks import common  # noqa: F401  (offline env)
from benchmarks.common import (
    check_peak_meter,
    interleaved,
    paired_ratios,
    peak_cpu_bytes,
    recipe_step_setup,
    summarise,
    write_result,
)
from mixcse.losses import materialised_mixcse_loss

# ----------------------------------------------------------------------------------------------------------------
# Part 1: the training step


def step_benchmark(rounds: int, warmup: int, threads: int) -> dict:
    from mixcse.losses import PRESETS
    from mixcse.training.step import make_step

    # The trainer's step without gradient clipping: forward, loss, backward, AdamW step, zero_grad.
    cfg, ctx, encoder, batch, optimizer = recipe_step_setup(threads, max_grad_norm=None)
    steps = {name: make_step(cfg, ctx, encoder, optimizer, PRESETS[name]) for name in ("simcse", "mixcse")}
    times = interleaved({name: (lambda step=step: step(batch)) for name, step in steps.items()},
                        repeats=rounds, warmup=warmup)
    ratios = paired_ratios(times["mixcse"], times["simcse"])
    return {"batch_shape": [2 * len(batch["input_ids"]), batch["input_ids"].shape[1]], "threads": threads,
            "rounds": rounds, "simcse_step_s": summarise(times["simcse"]), "mixcse_step_s": summarise(times["mixcse"]),
            "ratio": summarise(ratios), "raw": {**times, "ratio": ratios}}


# ----------------------------------------------------------------------------------------------------------------
# Part 2: the loss alone


def loss_benchmark(sizes: list[int], dim: int, repeats: int, threads: int, time_max_n: int) -> dict:
    from mixcse.losses import PRESETS, contrastive_loss

    torch.set_num_threads(threads)
    objective = PRESETS["mixcse"]
    out = {}
    for n in sizes:
        g = torch.Generator().manual_seed(n)
        # Embedding-like views: a shared direction (anisotropy: in-batch cosines ~0.7), per-sentence content, and
        # view noise (positive cosines ~0.96), so that the loss is O(1) as in training, not ~0.
        shared_direction = 1.5 * torch.randn(1, dim, generator=g)
        content = torch.randn(n, dim, generator=g)
        base1 = shared_direction + content
        z2_noise = base1 + 0.5 * torch.randn(n, dim, generator=g)

        # The inputs (the encoder's pooled outputs in training) exist before the loss: created outside the
        # measured region; their gradients, allocated by backward, are counted.
        z1, z2 = base1.clone().requires_grad_(), z2_noise.clone().requires_grad_()

        def closed_form():
            z1.grad = z2.grad = None
            loss = contrastive_loss(z1, z2, objective).loss
            loss.backward()
            return loss.detach(), z1.grad, z2.grad

        def materialised():
            z1.grad = z2.grad = None
            loss = materialised_mixcse_loss(z1, z2, objective.lam, objective.temperature)
            loss.backward()
            return loss.detach(), z1.grad, z2.grad

        peak_closed, res_c = peak_cpu_bytes(closed_form)
        peak_mat, res_m = peak_cpu_bytes(materialised)
        # Same function? Ground truth: the closed form in float64. Both fp32 results must be within fp32 rounding of
        # it, and at small N the two implementations must agree in float64 to ~1e-12 (a mathematical identity).
        w1, w2 = base1.double().requires_grad_(), z2_noise.double().requires_grad_()
        exact = contrastive_loss(w1, w2, objective).loss
        exact.backward()
        truth = (exact.detach(), w1.grad, w2.grad)

        def rel_errors(res):
            loss_err = abs(res[0].item() - truth[0].item()) / abs(truth[0].item())
            grad_err = max(((a.double() - b).abs().max() / b.abs().max()).item() for a, b in zip(res[1:], truth[1:]))
            return loss_err, grad_err

        errors = {"closed_form_fp32": rel_errors(res_c), "materialised_fp32": rel_errors(res_m)}
        if n <= 256:
            w1.grad = w2.grad = None
            m64 = materialised_mixcse_loss(w1, w2, objective.lam, objective.temperature)
            m64.backward()
            errors["materialised_fp64_vs_closed_fp64"] = rel_errors((m64.detach(), w1.grad, w2.grad))
        for name, (le, ge) in errors.items():
            bound = 1e-10 if "fp64" in name else 1e-4
            if le > bound or ge > bound:
                raise SystemExit(f"N={n}: {name} is off the float64 closed form (loss rel err {le:.1e}, grad {ge:.1e})")
        grad_err = max(errors["closed_form_fp32"][1], errors["materialised_fp32"][1])
        del res_c, res_m
        r = out[str(n)] = {
            "closed_form_peak_mb": peak_closed / 1e6, "materialised_peak_mb": peak_mat / 1e6,
            "memory_ratio": peak_mat / peak_closed,
            "rel_errors_vs_fp64_closed_form": {k: {"loss": v[0], "grad_max": v[1]} for k, v in errors.items()}}
        timing = "not timed (--quick)"
        if n <= time_max_n:
            times = interleaved({"closed_form": closed_form, "materialised": materialised}, repeats=repeats,
                                warmup=1)
            r.update(closed_form_s=summarise(times["closed_form"]), materialised_s=summarise(times["materialised"]),
                     time_ratio_materialised_over_closed=summarise(paired_ratios(times["materialised"],
                                                                                 times["closed_form"])),
                     raw=times)
            timing = (f"time {r['closed_form_s']['median'] * 1e3:.1f} vs {r['materialised_s']['median'] * 1e3:.1f} ms"
                      f" (x{r['time_ratio_materialised_over_closed']['median']:.1f})")
        print(f"  N={n:5d}  peak {r['closed_form_peak_mb']:7.1f} MB closed form vs {r['materialised_peak_mb']:7.1f} MB "
              f"materialised (x{r['memory_ratio']:.0f}); {timing}; fp32 grads within {grad_err:.1e} of float64",
              flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="few rounds (< 1 minute)")
    parser.add_argument("--threads", type=int, default=2, help="threads of the training-step part (default 2)")
    parser.add_argument("--loss-threads", type=int, default=1,
                        help="threads of the loss-alone part (default 1: its small N x N kernels are dominated by "
                             "thread wake-ups on a shared machine, which would hide the difference)")
    parser.add_argument("--rounds", type=int, help="step rounds (default 20, quick 3)")
    parser.add_argument("--no-write", action="store_true", help="do not write benchmarks/results/mixing_overhead.json")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 20)
    sizes = [64, 256, 1024] if args.quick else [64, 128, 256, 512, 1024]
    loss_repeats = 2 if args.quick else 5
    t0 = time.perf_counter()

    meter_mb = check_peak_meter()
    print(f"peak-memory meter self-test: {meter_mb:.1f} MB measured for 150.0 MB held")
    print(f"loss alone, mixcse preset, d=768, forward+backward, {loss_repeats} interleaved repeats, "
          f"{args.loss_threads} thread(s):")
    loss = loss_benchmark(sizes, 768, loss_repeats, args.loss_threads, 256 if args.quick else max(sizes))
    print(f"training step, batch 64 x 2 views, length 32, {args.threads} threads, {rounds} rounds:", flush=True)
    step = step_benchmark(rounds, 1, args.threads)
    ratio = step["ratio"]["median"]
    print(f"  SimCSE step {step['simcse_step_s']['median']:.3f} s, MixCSE step {step['mixcse_step_s']['median']:.3f} s"
          f" (medians of {rounds}); MixCSE/SimCSE per-round ratio median {ratio:.3f} "
          f"[IQR {step['ratio']['q1']:.3f}-{step['ratio']['q3']:.3f}]  target <= 1.05: "
          f"{'met' if ratio <= 1.05 else 'NOT met'}")
    mem = loss["1024"]["memory_ratio"]
    print(f"  memory ratio at N=1024: x{mem:.0f}  target >= 100: {'met' if mem >= 100 else 'NOT met'}")
    if not args.no_write:
        write_result("mixing_overhead", {
            "mode": "quick" if args.quick else "default", "step_time_ratio": ratio,
            "memory_ratio_n1024": mem, "targets": {"step_time_ratio_max": 1.05, "memory_ratio_n1024_min": 100},
            "memory_method": "torch.profiler(profile_memory=True) allocator events, running-sum peak",
            "peak_meter_selftest_mb": meter_mb, "loss_threads": args.loss_threads, "step": step, "loss": loss,
            "wall_s": time.perf_counter() - t0})


if __name__ == "__main__":
    main()
