"""The compiled step (``compile: true``) against the eager one, on this machine's CPU.

Two copies of the trainer's step on the stand-in (``common.recipe_step_setup``: cls + MLP head, one batch of 64
corpus sentences, max length 32, fused AdamW, clipping): eager as the trainer runs it on CPU (numpy dropout masks,
4 length buckets) and compiled (torch.compile with inductor; torch's dropout, every batch padded to 32 tokens so
that shapes are static). Time is interleaved, the figure is the median per-round ratio compiled / eager; the
compile time (first call) is reported apart. On CUDA the compiled step also uses CUDA graphs ("reduce-overhead"),
which is where it is meant to pay (``benchmarks/gpu_step.py``).

    python benchmarks/compiled_step.py            # ~3 min on 2 cores
    python benchmarks/compiled_step.py --rounds 3
"""

from __future__ import annotations

import argparse
import time

from benchmarks import common  # noqa: F401  (offline env)
from benchmarks.common import interleaved, paired_ratios, recipe_step_setup, summarise, write_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    from mixcse.training.step import make_step

    steps, compile_s = {}, None
    for name, compiled in (("eager", False), ("compiled", True)):
        cfg, ctx, encoder, batch, optimizer = recipe_step_setup(args.threads, compile=compiled)
        step = make_step(cfg, ctx, encoder, optimizer)
        t0 = time.perf_counter()
        step(batch)  # the first call compiles
        if compiled:
            compile_s = time.perf_counter() - t0
        steps[name] = (lambda step=step, batch=batch: step(batch))
    times = interleaved(steps, repeats=args.rounds, warmup=1)
    ratio = summarise(paired_ratios(times["compiled"], times["eager"]))
    print(f"compile (first call): {compile_s:.0f} s; step eager {summarise(times['eager'])['median']:.3f} s, compiled "
          f"{summarise(times['compiled'])['median']:.3f} s; compiled / eager {ratio['median']:.2f}")
    write_result("compiled_step", {"setting": {"model": "stand-in (mini-wiki-mlm)", "batch": 64, "max_seq_length": 32,
                                               "threads": args.threads, "rounds": args.rounds},
                                   "compile_seconds": compile_s, "compiled_over_eager": ratio,
                                   "eager_step_s": summarise(times["eager"]),
                                   "compiled_step_s": summarise(times["compiled"]), "raw": times})


if __name__ == "__main__":
    main()
