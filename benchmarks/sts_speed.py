"""Time the STS suite: mixcse's evaluator vs SentEval's per-pair encoding loop, same encoder, same scores.

SentEval encodes each STS subset as it comes: pairs sorted by length, then for every batch of pairs it encodes
the first sentences and the second sentences separately -- shared sentences are encoded again and again. The
evaluator gathers all distinct sentences across the suite and encodes each once. Both paths score with the
same cosine/Spearman code, so the scores must agree (exactly for a deterministic encoder; to the reported two
decimals for a model, whose padding differs between batchings).

    python benchmarks/sts_speed.py                      # stand-in model, full STS suite
    python benchmarks/sts_speed.py --quick              # STS13 + STS-B only (< 1 minute)
    python benchmarks/sts_speed.py --fake               # hashed bag-of-words encoder, no model needed
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mixcse.evaluation import evaluate  # noqa: E402
from mixcse.evaluation import senteval as D  # noqa: E402
from mixcse.evaluation.sts import pearson, row_cosine, spearman  # noqa: E402

FULL = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
QUICK = ("STS13", "STSBenchmark")


class HashedBagOfWords:
    """A cheap deterministic encoder: mean of fixed Gaussian vectors of hashed tokens."""

    def __init__(self, dim: int = 256, buckets: int = 1 << 14, seed: int = 0):
        self.table = np.random.RandomState(seed).randn(buckets, dim).astype(np.float32)
        self.buckets = buckets

    def encode(self, sentences, batch_size=64):
        out = np.zeros((len(sentences), self.table.shape[1]), dtype=np.float32)
        for i, s in enumerate(sentences):
            idx = [zlib.crc32(t.encode("utf-8")) % self.buckets for t in s.lower().split()]
            if idx:
                out[i] = self.table[idx].mean(0)
        return out


def _call(encoder, batch, batch_size):
    if hasattr(encoder, "encode"):
        return np.asarray(encoder.encode(batch, batch_size=batch_size), dtype=np.float32)
    return np.asarray(encoder(batch), dtype=np.float32)


def per_pair_loop(encoder, data_dir: Path, tasks, batch_size: int) -> tuple[dict, int]:
    """SentEval's STS loop: per subset, sort pairs by (len a, len b, gold), encode each batch's two sides."""
    results, encoded = {}, 0
    for task in tasks:
        if task in D.STS_SUBSETS:
            subsets = D.load_sts(data_dir, task)
        elif task == "STSBenchmark":
            subsets = {"test": D.load_stsb(data_dir, "test")}
        else:
            subsets = {"test": D.load_sick(data_dir)}
        sys_all, gold_all = [], []
        for ps in subsets.values():
            order = sorted(range(len(ps)), key=lambda i: (len(ps.a[i].split()), len(ps.b[i].split()), ps.scores[i]))
            sims = []
            for start in range(0, len(order), batch_size):
                idx = order[start:start + batch_size]
                ea = _call(encoder, [ps.a[i] for i in idx], batch_size)
                eb = _call(encoder, [ps.b[i] for i in idx], batch_size)
                encoded += 2 * len(idx)
                sims.append(row_cosine(ea, eb))
            sys_all.append(np.concatenate(sims))
            gold_all.append(ps.scores[order])
        s, g = np.concatenate(sys_all), np.concatenate(gold_all)
        results[task] = {"spearman": spearman(s, g), "pearson": pearson(s, g)}
    return results, encoded


def _torch_threads():
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="../shared/models/mini-wiki-mlm")
    ap.add_argument("--pooler", default="cls_before_pooler")
    ap.add_argument("--fake", action="store_true", help="use a hashed bag-of-words encoder instead of a model")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's own)")
    ap.add_argument("--output", default=str(Path(__file__).parent / "results" / "sts_speed.json"))
    args = ap.parse_args(argv)

    data_dir = D.resolve_data_dir(args.data_dir)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    tasks = QUICK if args.quick else FULL
    if args.fake:
        encoder, name = HashedBagOfWords(), "hashed bag-of-words (256-d)"
    else:
        from mixcse.sentence_encoder import SentenceEncoder

        encoder = SentenceEncoder.load(args.model, pooler=args.pooler)
        name = f"{args.model} ({args.pooler})"
    warm = D.load_stsb(data_dir, "dev")  # warm-up on sentences of realistic lengths, outside the timed runs
    _call(encoder, warm.a[:2 * args.batch_size], args.batch_size)

    t0 = time.perf_counter()
    loop_scores, loop_encoded = per_pair_loop(encoder, data_dir, tasks, args.batch_size)
    loop_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    res = evaluate(encoder, tasks=list(tasks), data_dir=data_dir, batch_size=args.batch_size, verbose=False)
    eval_s = time.perf_counter() - t0

    ours = {t: {"spearman": res["sts"][t]["spearman"], "pearson": res["sts"][t]["pearson"]} for t in tasks}
    diff = max(abs(ours[t][k] - loop_scores[t][k]) for t in tasks for k in ("spearman", "pearson"))
    out = {
        "encoder": name, "tasks": list(tasks), "quick": args.quick, "batch_size": args.batch_size,
        "per_pair_loop": {"seconds": round(loop_s, 3), "sentences_encoded": loop_encoded},
        "evaluator": {"seconds": round(eval_s, 3),
                      "sentences_encoded": res["settings"]["encoding"]["distinct_sentences"],
                      "seconds_by_step": res["settings"]["seconds"]},
        "speedup": round(loop_s / eval_s, 2),
        "scores": {"evaluator": ours, "per_pair_loop": loop_scores},
        "max_abs_score_diff_x100": diff,
        "note": "SentEval (SimCSE's copy) additionally encodes STS-B and SICK train/dev; only test is timed here",
        "machine": {"cpu_count": os.cpu_count(), "torch_threads": _torch_threads(),
                    "load_average_after": list(os.getloadavg()) if hasattr(os, "getloadavg") else None},
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(out, indent=2) + "\n")
    for t in tasks:
        print(f"{t:16s} evaluator {ours[t]['spearman']:7.2f}   per-pair loop {loop_scores[t]['spearman']:7.2f}")
    print(f"per-pair loop: {loop_s:.1f} s ({loop_encoded} encodings); evaluator: {eval_s:.1f} s "
          f"({out['evaluator']['sentences_encoded']} distinct sentences); speed-up x{out['speedup']}")
    print(f"wrote {args.output}")
    # Same encoder, same pairs: the scores must agree (a model's padding differs between batchings, so
    # allow float noise below the two reported decimals).
    tol = 1e-9 if args.fake else 5e-3
    assert diff <= tol, f"scores differ by {diff} (x100) between the two paths"
    return 0


if __name__ == "__main__":
    sys.exit(main())
