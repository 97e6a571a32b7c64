"""Big batches in the memory of a small one: the cached step (``mini_batch_size``) against the one-pass step.

One process, the stand-in backbone (cls pooler + MLP head, max length 32, the trainer's CPU step: fused AdamW, numpy
dropout masks, 4 length buckets, clipping), corpus sentences. For each batch size N and each step kind:

* peak memory of one step: the high-water mark of torch's CPU allocator above what was live before the step (the
  weights and AdamW's state, allocated by an untimed first step), read from torch.profiler's memory events
  (``common.peak_cpu_bytes``), and the time of one more step (indicative only: the machine is shared).

One-pass steps run up to ``--max-onepass`` (their activations grow with N); cached steps (K = ``--mini-batch``) up
to 4096. Then, at N = ``--compare-at``, four steps alternate (``common.interleaved``) so that their time ratios
are robust to the machine's load: one-pass MixCSE, cached MixCSE, cached SimCSE, and sentence-transformers'
``CachedMultipleNegativesRankingLoss`` (scale 20 = temperature 0.05, i.e. SimCSE; same mini-batch) on the same
backbone with CLS pooling; its step = loss forward + backward + clipping + AdamW step.

Figures: ``peak_memory_ratio_4096_cached_vs_64`` (cached at N = 4096 over one-pass at N = 64; goal <= 1.5) and
``time_per_sentence_ratio_cached_vs_onepass`` (at N = ``--compare-at``, where both fit; goal <= 1.4).

    python benchmarks/big_batch.py            # ~15 min on 2 idle cores
    python benchmarks/big_batch.py --quick    # N <= 256, one round
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from benchmarks import common  # noqa: F401  (offline env)
from benchmarks.common import (
    STAND_IN,
    check_peak_meter,
    interleaved,
    paired_ratios,
    peak_cpu_bytes,
    read_corpus,
    summarise,
    write_result,
)

MAX_LEN = 32


def mixcse_step(n: int, mini_batch: int | None, loss: str, sentences: list[str], threads: int):
    """The trainer's step for a batch of ``n`` (``mini_batch`` None = one pass), and its batch."""
    from benchmarks.common import model_setup
    from mixcse.data.memory import TokenizedCorpus
    from mixcse.training.config import TrainConfig
    from mixcse.training.distributed import DistContext
    from mixcse.training.step import make_step

    cfg = TrainConfig(model=str(STAND_IN), train_file="-", output_dir="-", pooler="cls", loss=loss, batch_size=n,
                      mini_batch_size=mini_batch, max_seq_length=MAX_LEN)
    ctx = DistContext()
    encoder, tokenizer, optimizer = model_setup(cfg, ctx, threads, seed=0)
    batch = TokenizedCorpus(sentences[:n], tokenizer, MAX_LEN).batch(np.arange(n))
    step = make_step(cfg, ctx, encoder, optimizer)
    return lambda: step(batch)


def st_step(n: int, mini_batch: int, sentences: list[str], threads: int):
    """sentence-transformers' cached SimCSE step on the same backbone: (sentence, sentence) pairs, dropout on."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    backbone = Transformer(str(STAND_IN), max_seq_length=MAX_LEN)
    model = SentenceTransformer(modules=[backbone, Pooling(backbone.get_embedding_dimension(), "cls")],
                                device="cpu")
    model.train()
    loss = CachedMultipleNegativesRankingLoss(model, scale=20.0, mini_batch_size=mini_batch)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5, fused=True)
    features = model.tokenize(sentences[:n])

    def step():
        value = loss([dict(features), dict(features)], None)
        value.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return value

    return step


def measure(step, n: int) -> dict:
    """The time of one step and the peak memory of the next (after a first, untimed step has allocated AdamW's
    state, as in training)."""
    step()
    t0 = time.perf_counter()  # timed before the profiled step: a step after torch.profiler ran slower
    step()
    seconds = time.perf_counter() - t0
    peak, _ = peak_cpu_bytes(step)
    row = {"batch": n, "peak_mb": peak / 1e6, "step_s": seconds, "ms_per_sentence": 1e3 * seconds / n}
    print(f"  N={n:5d}  peak {row['peak_mb']:8.1f} MB  {row['ms_per_sentence']:6.2f} ms/sentence", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mini-batch", type=int, default=64)
    parser.add_argument("--max-onepass", type=int, default=1024)
    parser.add_argument("--max-cached", type=int, default=4096)
    parser.add_argument("--compare-at", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds at --compare-at")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--timing-only", action="store_true",
                        help="only the interleaved side-by-side timing -> big_batch_timing.json")
    args = parser.parse_args()
    if args.quick:
        args.max_onepass, args.max_cached, args.compare_at, args.rounds = 128, 256, 128, 1
    k = args.mini_batch
    meter_mb = check_peak_meter()
    sentences = read_corpus(max(args.max_cached, args.compare_at))

    # 1. Memory (and one timed step) against the batch size.
    sizes = [n for n in (64, 128, 256, 512, 1024, 2048, 4096) if n <= args.max_cached]
    sweep: dict[str, list[dict]] = {"onepass_mixcse": [], "cached_mixcse": []}
    for n in [] if args.timing_only else sizes:
        if n <= args.max_onepass:
            print(f"one-pass mixcse, N={n}", flush=True)
            sweep["onepass_mixcse"].append(measure(mixcse_step(n, None, "mixcse", sentences, args.threads), n))
        if n >= k:
            print(f"cached mixcse (K={k}), N={n}", flush=True)
            sweep["cached_mixcse"].append(measure(mixcse_step(n, k, "mixcse", sentences, args.threads), n))

    # 2. Side by side at one batch size where every step fits, interleaved: time ratios robust to the machine's load.
    n = args.compare_at
    sides = {"onepass_mixcse": mixcse_step(n, None, "mixcse", sentences, args.threads),
             "cached_mixcse": mixcse_step(n, k, "mixcse", sentences, args.threads),
             "cached_simcse": mixcse_step(n, k, "simcse", sentences, args.threads),
             "st_cached_simcse": st_step(n, k, sentences, args.threads)}
    print(f"interleaved timing at N={n}: {args.rounds} rounds", flush=True)
    times = interleaved(sides, repeats=args.rounds, warmup=1)
    peaks = {name: peak_cpu_bytes(step)[0] / 1e6 for name, step in sides.items()}
    ratio = summarise(paired_ratios(times["cached_mixcse"], times["onepass_mixcse"]))["median"]
    st_ratio = summarise(paired_ratios(times["st_cached_simcse"], times["cached_simcse"]))["median"]
    side_by_side = {name: {"peak_mb": peaks[name], "step_s": summarise(times[name]),
                           "sentences_per_s": n / summarise(times[name])["median"]} for name in sides}

    if args.timing_only:
        print(f"time per sentence, cached / one-pass at N={n}: {ratio:.2f}; sentence-transformers' cached SimCSE / "
              f"mixcse's: {st_ratio:.2f}")
        write_result("big_batch_timing", {"setting": {"mini_batch_size": k, "threads": args.threads,
                                                      "rounds": args.rounds},
                                          "time_per_sentence_ratio_cached_vs_onepass": ratio,
                                          "time_ratio_measured_at_batch": n, "st_time_ratio_vs_mixcse_cached_simcse":
                                          st_ratio, "side_by_side": side_by_side, "raw_times": times})
        return
    def row(kind: str, size: int) -> dict:
        return next(r for r in sweep[kind] if r["batch"] == size)

    largest = sizes[-1]
    memory_ratio = row("cached_mixcse", largest)["peak_mb"] / row("onepass_mixcse", 64)["peak_mb"]
    summary = {f"peak_memory_ratio_{largest}_cached_vs_64": memory_ratio,
               "time_per_sentence_ratio_cached_vs_onepass": ratio,
               "time_ratio_measured_at_batch": n,
               "st_time_ratio_vs_mixcse_cached_simcse": st_ratio}
    print(f"peak memory, cached N={largest} (K={k}) / one-pass N=64: {memory_ratio:.2f} (goal <= 1.5)")
    print(f"time per sentence, cached / one-pass at N={n}: {ratio:.2f} (goal <= 1.4)")
    print(f"sentence-transformers' cached SimCSE step / mixcse's at N={n}: {st_ratio:.2f} (time); peak "
          f"{peaks['st_cached_simcse']:.0f} vs {peaks['cached_simcse']:.0f} MB")
    write_result("big_batch_quick" if args.quick else "big_batch", {
        "setting": {"model": "stand-in (mini-wiki-mlm)", "pooler": "cls + MLP head", "max_seq_length": MAX_LEN,
                    "mini_batch_size": k, "threads": args.threads, "rounds": args.rounds,
                    "peak_meter_selftest_mb": meter_mb},
        **summary, "side_by_side": side_by_side, "sweep": sweep, "raw_times": times})


if __name__ == "__main__":
    main()
