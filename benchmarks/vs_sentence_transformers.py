"""mixcse vs sentence-transformers on the same unsupervised SimCSE run.

Both sides, in one process, alternating short runs (the order flips every round), after one untimed warm-up run
of each:

* **peer**: ``SentenceTransformer([Transformer(stand-in, max_seq_length=32), Pooling(256, "cls")])`` trained by
  ``SentenceTransformerTrainer`` with ``MultipleNegativesRankingLoss(scale=20)`` (= temperature 0.05) on
  (sentence, sentence) pairs: dropout makes the two views. Batch 64, AdamW lr 3e-5, linear decay, no warm-up, no
  weight decay, grad-norm clip 1.0 (HF default), fp32, no evaluation, no checkpoints (``save_strategy="no"``).
  Everything else is the library's default -- notably HF's fused AdamW and ST's separate forward pass per column.
* **mixcse**: ``mixcse.train`` with ``loss=simcse`` (one direction, temperature 0.05), ``pooler=cls_before_pooler``
  (raw [CLS], no MLP head: the peer's pooling), the same batch, length, optimiser settings, precision and threads;
  evaluation disabled (``select_on: none``). It always writes its final checkpoint and model at the
  end; that is counted against it.

Same sentences (``steps x 64`` corpus lines, the same ones for both sides in a round), same backbone weights, same
threads (``torch.set_num_threads``), fp32 both.

Timing: **model load is excluded from both.** The peer's load is the ``SentenceTransformer(...)`` construction; mixcse's
is the time spent inside ``load_encoder`` (wrapped here with a timer, no change to mixcse). What is counted is
everything else from the call to the return: data set construction / reading the sentence file, tokenisation (once
ahead for mixcse, per batch in the peer's collator), trainer set-up, the steps, and mixcse's final writes.
``sentences/s = steps x 64 / that time``. The machine is shared, so every figure is a median of per-round ratios
(the two sides of a round run back to back). Also reported: the process CPU time of each run, and the training
loop alone (mixcse's ``train_seconds``; the peer's on_train_begin -> last on_step_end), which leaves out mixcse's
tokenisation and final writes.

A third side, run only in the default mode, is an ablation: mixcse with ``length_buckets: 1`` (each batch forwarded as
one pass padded to its longest sentence, as the peer does), to show what the length-bucketed forward contributes.

    python benchmarks/vs_sentence_transformers.py          # 8 rounds x 10 steps per side (+ the ablation side)
    python benchmarks/vs_sentence_transformers.py --quick  # 1 round x 2 steps, no warm-up run
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path

import torch

from benchmarks import common  # noqa: F401
from benchmarks.common import STAND_IN, paired_ratios, read_corpus, summarise, write_result

BATCH, MAX_LEN, LR, SCALE = 64, 32, 3e-5, 20.0


def quiet() -> None:
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    warnings.filterwarnings("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    for name in ("sentence_transformers", "datasets", "accelerate"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        import datasets

        datasets.disable_progress_bars()
    except ImportError:
        pass


def run_peer(sentences: list[str], steps: int, threads: int, workdir: Path, seed: int) -> dict:
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        begin = last = None

        def on_train_begin(self, *args, **kwargs):
            self.begin = time.perf_counter()

        def on_step_end(self, *args, **kwargs):
            self.last = time.perf_counter()

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    transformer = Transformer(str(STAND_IN), max_seq_length=MAX_LEN)
    model = SentenceTransformer(modules=[transformer, Pooling(transformer.get_embedding_dimension(), "cls")],
                                device="cpu")
    t1 = time.perf_counter()
    dataset = Dataset.from_dict({"anchor": sentences, "positive": sentences})
    args = SentenceTransformerTrainingArguments(
        output_dir=str(workdir / "peer"), per_device_train_batch_size=BATCH, max_steps=steps, learning_rate=LR,
        weight_decay=0.0, lr_scheduler_type="linear", max_grad_norm=1.0, logging_steps=10, save_strategy="no",
        eval_strategy="no", report_to="none", use_cpu=True, bf16=False, fp16=False, disable_tqdm=True,
        dataloader_drop_last=True, seed=seed)
    clock = Clock()
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset,
                                         loss=MultipleNegativesRankingLoss(model, scale=SCALE), callbacks=[clock])
    trainer.train()
    t2 = time.perf_counter()
    assert trainer.state.global_step == steps, trainer.state.global_step
    info = {"optimizer": type(trainer.optimizer.optimizer if hasattr(trainer.optimizer, "optimizer")
                              else trainer.optimizer).__name__, "optim": str(args.optim),
            "attn_implementation": model[0].model.config._attn_implementation,
            "threads_after": torch.get_num_threads()}
    return {"load_s": t1 - t0, "run_s": t2 - t1, "loop_s": clock.last - clock.begin,
            "setup_s": clock.begin - t1, "info": info}


def run_mixcse(train_file: Path, steps: int, threads: int, workdir: Path, seed: int,
               length_buckets: int | None = None) -> dict:
    import mixcse
    import mixcse.training.trainer as trainer_module

    load_time = []
    original = trainer_module.load_encoder

    def timed_load(*args, **kwargs):
        t = time.perf_counter()
        result = original(*args, **kwargs)
        load_time.append(time.perf_counter() - t)
        return result

    out = workdir / "mixcse"
    config = {"model": str(STAND_IN), "train_file": str(train_file), "output_dir": str(out), "loss": "simcse",
              "temperature": 1.0 / SCALE, "pooler": "cls_before_pooler", "batch_size": BATCH,
              "max_seq_length": MAX_LEN, "learning_rate": LR, "weight_decay": 0.0, "warmup_ratio": 0.0,
              "max_grad_norm": 1.0, "max_steps": steps, "precision": "fp32", "num_threads": threads,
              "select_on": "none", "log_steps": 10, "seed": seed}
    if length_buckets is not None:
        config["length_buckets"] = length_buckets
    trainer_module.load_encoder = timed_load
    try:
        t0 = time.perf_counter()
        result = mixcse.train(config, overwrite=True, progress=False)
        total = time.perf_counter() - t0
    finally:
        trainer_module.load_encoder = original
    assert result.steps == steps, result.steps
    return {"load_s": load_time[0], "run_s": total - load_time[0], "loop_s": result.train_seconds,
            "outside_loop_s": total - load_time[0] - result.train_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--steps", type=int, help="training steps per run (default 10, quick 2)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-ablation", action="store_true",
                        help="skip the third side, mixcse with length_buckets=1 (never in --quick)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    ablation = not (args.quick or args.no_ablation)
    rounds = args.rounds or (1 if args.quick else 8)
    steps = args.steps or (2 if args.quick else 10)
    quiet()
    t_start = time.perf_counter()
    import sentence_transformers  # noqa: F401  (import time counted in neither side)

    import mixcse  # noqa: F401

    workdir = Path(tempfile.mkdtemp(prefix="mixcse-vs-st-"))
    sides = ["mixcse", "sentence_transformers"] + (["mixcse_one_pass"] if ablation else [])
    runs = {side: [] for side in sides}
    try:
        def one_round(r: int, n_steps: int, timed: bool) -> None:
            sentences = read_corpus(n_steps * BATCH, skip=r * n_steps * BATCH)
            train_file = workdir / f"train-{r}.txt"
            train_file.write_text("\n".join(sentences) + "\n")
            order = sides if r % 2 == 0 else sides[::-1]
            for side in order:
                cpu0 = time.process_time()
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    if side == "sentence_transformers":
                        res = run_peer(sentences, n_steps, args.threads, workdir, seed=r)
                    else:
                        res = run_mixcse(train_file, n_steps, args.threads, workdir, seed=r,
                                         length_buckets=1 if side == "mixcse_one_pass" else None)
                res["process_cpu_s"] = time.process_time() - cpu0  # all threads, model load included
                res["sentences_per_s"] = n_steps * BATCH / res["run_s"]
                res["loop_sentences_per_s"] = n_steps * BATCH / res["loop_s"]
                print(f"  {'round ' + str(r) if timed else 'warm-up':8s} {side:22s}  load {res['load_s']:5.1f} s, "
                      f"run {res['run_s']:6.1f} s -> {res['sentences_per_s']:6.1f} sentences/s "
                      f"(loop only {res['loop_sentences_per_s']:6.1f})", flush=True)
                if timed:
                    runs[side].append(res)
                for sub in ("mixcse", "peer"):
                    shutil.rmtree(workdir / sub, ignore_errors=True)

        if not args.quick:
            one_round(0, 1, timed=False)  # warm-up: one-step run of each side, untimed
        for r in range(rounds):
            one_round(r + 1, steps, timed=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    mx, st = runs["mixcse"], runs["sentence_transformers"]
    ratio = paired_ratios([m["sentences_per_s"] for m in mx], [s["sentences_per_s"] for s in st])
    cpu_ratio = paired_ratios([s["process_cpu_s"] for s in st], [m["process_cpu_s"] for m in mx])
    loop_ratio = paired_ratios([m["loop_sentences_per_s"] for m in mx], [s["loop_sentences_per_s"] for s in st])
    summary = {
        "mixcse_sentences_per_s": summarise([m["sentences_per_s"] for m in mx]),
        "sentence_transformers_sentences_per_s": summarise([s["sentences_per_s"] for s in st]),
        "throughput_ratio": summarise(ratio)["median"],
        "throughput_ratio_per_round": ratio,
        "loop_only": {"mixcse_sentences_per_s": summarise([m["loop_sentences_per_s"] for m in mx]),
                      "sentence_transformers_sentences_per_s": summarise([s["loop_sentences_per_s"] for s in st]),
                      "ratio": summarise(loop_ratio)["median"], "ratio_per_round": loop_ratio},
        "cpu_time": {"note": "process CPU seconds of each whole run (model load included), peer / mixcse: less "
                             "sensitive than wall time to other processes' load, more to spin-waiting threads",
                     "ratio": summarise(cpu_ratio)["median"], "ratio_per_round": cpu_ratio},
    }
    if ablation:
        fx = runs["mixcse_one_pass"]
        ab = paired_ratios([m["sentences_per_s"] for m in fx], [s["sentences_per_s"] for s in st])
        summary["ablation_one_pass"] = {
            "note": "mixcse with length_buckets=1: each batch forwarded as one pass padded to its longest sentence",
            "sentences_per_s": summarise([m["sentences_per_s"] for m in fx]),
            "throughput_ratio": summarise(ab)["median"],
            "throughput_ratio_per_round": ab,
            "default_over_one_pass": summarise(paired_ratios([m["sentences_per_s"] for m in mx],
                                                             [m["sentences_per_s"] for m in fx]))["median"]}
        one_pass = summary['ablation_one_pass']
        print(f"ablation, mixcse with length_buckets=1: {one_pass['sentences_per_s']['median']:.1f} "
              f"sentences/s, x{one_pass['throughput_ratio']:.2f} the peer; the default (4 buckets) "
              f"is x{one_pass['default_over_one_pass']:.2f} that")
    print(f"mixcse {summary['mixcse_sentences_per_s']['median']:.1f} sentences/s vs sentence-transformers "
          f"{summary['sentence_transformers_sentences_per_s']['median']:.1f} (medians of {rounds} runs of {steps} "
          f"steps); per-round ratio median x{summary['throughput_ratio']:.2f} "
          f"(loop only x{summary['loop_only']['ratio']:.2f}, CPU time x{summary['cpu_time']['ratio']:.2f})"
          f"; target >= 1.2: {'met' if summary['throughput_ratio'] >= 1.2 else 'NOT met'}")
    if not args.no_write:
        import datasets
        import sentence_transformers as st_pkg
        import transformers

        write_result("vs_sentence_transformers", {
            "mode": "quick" if args.quick else "default", "rounds": rounds, "steps_per_run": steps,
            "batch_size": BATCH, "max_seq_length": MAX_LEN, "threads": args.threads, "precision": "fp32",
            "timing": "model load excluded from both; data prep, tokenisation, trainer set-up, steps and mixcse's "
                      "final checkpoint/model writes included",
            "versions": {"sentence_transformers": st_pkg.__version__, "transformers": transformers.__version__,
                         "datasets": datasets.__version__},
            "peer_info": st[0]["info"] if st else None, **summary, "target": 1.2,
            "raw": runs, "wall_s": time.perf_counter() - t_start})


if __name__ == "__main__":
    main()
