"""GPU readiness: SimCSE and MixCSE training steps of a BERT-base-size encoder, eager and (``--compile``) compiled.

Self-contained, no downloads: the encoder is ``transformers.BertModel(BertConfig())`` (BERT-base shape: 12 layers,
hidden 768, 12 heads, vocab 30522; random weights) inside ``mixcse.model.Encoder`` with the training pooler
(``cls`` + MLP head); the batch is random token ids ([CLS] ... [SEP], no tokenizer), length 32, two dropout views.
A step is the trainer's (``mixcse.training.step.make_step``, one forward pass): bf16 autocast forward,
``mixcse.losses.contrastive_loss`` (fp32), backward, grad-norm clip, AdamW (``torch.optim.AdamW`` as the trainer builds
it), zero_grad. SimCSE and MixCSE alternate in blocks of steps after a warm-up; per configuration the report gives the
median block's steps/s. With ``--compile`` the same two steps built with ``compile: true`` (``torch.compile`` with
static shapes; CUDA graphs on CUDA) join the alternation, so eager and compiled are timed side by side.

Achieved TFLOP/s counts, per step, with T = tokens per step (2 views x batch x 32), P = parameters that enter
matrix multiplies (all but the embedding tables: encoder layers + MLP head; the token/position/type embeddings are
lookups), L layers, d hidden size, S sequence length:

    FLOPs/step = 6 * P * T            (forward 2PT + backward 4PT)
               + 12 * L * S * d * T   (attention scores QK^T and weighted sum AV: 4*S*d per token per layer in the
                                       forward, x3 with the backward)

The loss (O(N^2 d)) is negligible and not counted. The projected paper epoch is 1,000,000 sentences / 64 per step
= 15,625 steps at the batch-64 step time (SimCSE's and MixCSE's published setting).

    python benchmarks/gpu_step.py            # CUDA: batch 64 and 512, ~1 minute; no CUDA: the smoke configuration
    python benchmarks/gpu_step.py --compile  # + the compiled steps side by side (-> gpu_step_compile.json)
    python benchmarks/gpu_step.py --smoke    # tiny BERT, batch 16 and 64, length 16, CPU or GPU: tests the script
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks import common  # noqa: F401
from benchmarks.common import write_result

EPOCH_SENTENCES, PAPER_BATCH = 1_000_000, 64


def build(config, device, pooler: str = "cls"):
    from transformers import BertModel

    from mixcse.model import Encoder

    torch.manual_seed(0)
    backbone = BertModel(config, add_pooling_layer=False)
    encoder = Encoder(backbone, pooler).to(device)
    encoder.train()
    return encoder


def matmul_params(encoder) -> int:
    """P: every parameter outside the embedding module (layers + MLP head; biases and norms included, <0.1%)."""
    return sum(p.numel() for name, p in encoder.named_parameters() if ".embeddings." not in name)


def flops_per_step(encoder, config, batch: int, seq: int) -> float:
    tokens = 2 * batch * seq
    return 6 * matmul_params(encoder) * tokens + 12 * config.num_hidden_layers * seq * config.hidden_size * tokens


def random_batch(config, batch: int, seq: int, device) -> dict[str, torch.Tensor]:
    """One view of ``batch`` random sentences (the step makes the two dropout views)."""
    g = torch.Generator().manual_seed(batch * 1000 + seq)
    ids = torch.randint(1000, config.vocab_size, (batch, seq), generator=g)
    ids[:, 0], ids[:, -1] = 101, 102  # [CLS] ... [SEP]
    return {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device)}


def measure(encoder, config, batch: int, seq: int, device, dtype, blocks: int, steps_per_block: int,
            warmup: int, compiled: bool = False) -> dict:
    from mixcse.losses import PRESETS
    from mixcse.training.config import TrainConfig
    from mixcse.training.distributed import DistContext
    from mixcse.training.step import make_step
    from mixcse.training.trainer import build_optimizer

    data = random_batch(config, batch, seq, device)
    cfg = TrainConfig()
    optimizer = build_optimizer(encoder, cfg, device)  # the trainer's: fused AdamW
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    precision = {torch.bfloat16: "bf16", torch.float16: "fp16", None: "fp32"}[dtype]
    steps = {name: make_step(cfg, DistContext(device=device), encoder, optimizer, PRESETS[name],
                             precision=precision, length_buckets=1) for name in ("simcse", "mixcse")}
    if compiled:  # the trainer's compiled step: batches padded to max_seq_length (here every batch is that long)
        compiled_cfg = TrainConfig(compile=True, max_seq_length=seq)
        steps.update({f"{name}_compiled": make_step(compiled_cfg, DistContext(device=device), encoder, optimizer,
                                                    PRESETS[name], precision=precision)
                      for name in ("simcse", "mixcse")})

    def step(name):
        steps[name](data)

    objectives = list(steps)
    for name in objectives:
        for _ in range(warmup):
            step(name)
    sync()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    per_block: dict[str, list[float]] = {name: [] for name in objectives}
    for b in range(blocks):
        for name in (objectives if b % 2 == 0 else objectives[::-1]):
            sync()
            t0 = time.perf_counter()
            for _ in range(steps_per_block):
                step(name)
            sync()
            per_block[name].append((time.perf_counter() - t0) / steps_per_block)
    flops = flops_per_step(encoder, config, batch, seq)
    out = {"batch": batch, "seq_len": seq, "tokens_per_step": 2 * batch * seq, "flops_per_step": flops}
    for name, times in per_block.items():
        t = statistics.median(times)
        out[name] = {"step_s": t, "steps_per_s": 1.0 / t, "sentences_per_s": batch / t,
                     "tflops": flops / t / 1e12, "block_step_s": times}
    out["mixcse_over_simcse_time"] = out["mixcse"]["step_s"] / out["simcse"]["step_s"]
    if compiled:
        for name in ("simcse", "mixcse"):
            out[f"{name}_compiled_speedup"] = out[name]["step_s"] / out[f"{name}_compiled"]["step_s"]
    if device.type == "cuda":
        out["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny configuration (automatic without CUDA)")
    parser.add_argument("--batches", type=int, nargs="+", help="batch sizes (default 64 512; smoke 16 64)")
    parser.add_argument("--compile", action="store_true",
                        help="also time the compiled steps (compile: true), interleaved with the eager ones")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    import transformers
    from transformers import BertConfig

    transformers.logging.set_verbosity_error()
    cuda = torch.cuda.is_available()
    smoke = args.smoke or not cuda
    device = torch.device("cuda" if cuda else "cpu")
    if smoke:
        config = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                            vocab_size=2000)
        batches, seq, blocks, per_block, warmup = args.batches or [16, 64], 16, 2, 2, 1
        why = "--smoke" if args.smoke else "no CUDA device"
        print(f"smoke configuration ({why}): tiny BERT (2 layers, hidden 64), batches {batches}, length {seq}, "
              f"on {device}; figures below test the script, they are not GPU figures")
    else:
        config = BertConfig()  # BERT-base
        batches, seq, blocks, per_block, warmup = args.batches or [64, 512], 32, 4, 10, 5
        print(f"{torch.cuda.get_device_name(0)}: BERT-base (random weights), bf16 autocast, length {seq}, "
              f"batches {batches}")
    dtype = torch.bfloat16  # bf16 autocast on CUDA and, in the smoke run, on CPU
    t_start = time.perf_counter()
    encoder = build(config, device)
    p_all = sum(p.numel() for p in encoder.parameters())
    p_mm = matmul_params(encoder)
    print(f"parameters: {p_all / 1e6:.1f}M in all, {p_mm / 1e6:.1f}M in matrix multiplies (P in the FLOP count)")
    print("FLOPs/step = 6*P*T + 12*L*S*d*T   (T = 2 views x batch x S tokens; L layers, d hidden, S length)")
    results = []
    for batch in batches:
        r = measure(encoder, config, batch, seq, device, dtype, blocks, per_block, warmup, compiled=args.compile)
        results.append(r)
        mem = f", peak {r['peak_memory_gib']:.1f} GiB" if "peak_memory_gib" in r else ""
        print(f"batch {batch:4d}: SimCSE {r['simcse']['steps_per_s']:7.2f} steps/s "
              f"({r['simcse']['tflops']:.3g} TFLOP/s), MixCSE {r['mixcse']['steps_per_s']:7.2f} steps/s "
              f"({r['mixcse']['tflops']:.3g} TFLOP/s); MixCSE/SimCSE time x{r['mixcse_over_simcse_time']:.3f}{mem}",
              flush=True)
        if args.compile:
            print(f"            compiled: SimCSE {r['simcse_compiled']['steps_per_s']:7.2f} steps/s "
                  f"(x{r['simcse_compiled_speedup']:.2f} eager), MixCSE {r['mixcse_compiled']['steps_per_s']:7.2f} "
                  f"steps/s (x{r['mixcse_compiled_speedup']:.2f} eager)", flush=True)
    projection = {}
    ref = next((r for r in results if r["batch"] == PAPER_BATCH), None)
    if ref is not None:
        steps = EPOCH_SENTENCES // PAPER_BATCH
        for name in ("simcse", "mixcse", "simcse_compiled", "mixcse_compiled"):
            if name in ref:
                projection[name + "_epoch_s"] = steps * ref[name]["step_s"]
        print(f"projected paper epoch (1M sentences, {steps} steps of {PAPER_BATCH}): SimCSE "
              f"{projection['simcse_epoch_s'] / 60:.1f} min, MixCSE {projection['mixcse_epoch_s'] / 60:.1f} min "
              f"(steps only: no evaluation, data loading or checkpoints)")
        if args.compile:
            print(f"  compiled: SimCSE {projection['simcse_compiled_epoch_s'] / 60:.1f} min, MixCSE "
                  f"{projection['mixcse_compiled_epoch_s'] / 60:.1f} min")
    else:
        print(f"(no batch-{PAPER_BATCH} configuration measured: no paper-epoch projection)")
    if not args.no_write:
        name = ("gpu_step_smoke" if smoke else "gpu_step") + ("_compile" if args.compile else "")
        write_result(name, {
            "mode": "smoke" if smoke else "full", "compiled_side": args.compile,
            "device": torch.cuda.get_device_name(0) if cuda else "cpu",
            "precision": "bf16 autocast", "params_total": p_all, "params_matmul": p_mm,
            "flops_formula": "6*P*T + 12*L*S*d*T, T = 2*batch*S tokens per step",
            "config": {"layers": config.num_hidden_layers, "hidden": config.hidden_size,
                       "heads": config.num_attention_heads, "seq_len": seq},
            "results": results, "projection": projection, "wall_s": time.perf_counter() - t_start})


if __name__ == "__main__":
    main()
