"""The paper's embedding-space analysis on STS-B: alignment / uniformity and the spherical cap.

Wang & Isola (2020) with t = 2 on L2-normalised embeddings:
  alignment  = E_{(x,y) positive} ||f(x) - f(y)||^2        (positive = STS-B pairs with gold > 4)
  uniformity = log E_{x != y} exp(-2 ||f(x) - f(y)||^2)    (over all distinct STS-B sentences)
Lower is better for both. The cap is the max / mean pairwise angle between sentence embeddings: anisotropic
embeddings (a narrow cone) have small angles.

STS-B's train split is not used anywhere (the unsupervised protocol never sees it); the analysis uses dev+test,
the larger sample, and says so in the results.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from mixcse.evaluation import senteval as D
from mixcse.evaluation.evaluator import Evaluator
from mixcse.evaluation.senteval import PairSet

ANALYSIS_SPLITS = ("dev", "test")
POSITIVE_THRESHOLD = 4.0
T = 2.0


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(n > 0, n, 1.0)


def alignment(a: np.ndarray, b: np.ndarray) -> float:
    a, b = _normalise(a), _normalise(b)
    return float(np.mean(np.sum((a - b) ** 2, axis=1))) if len(a) else float("nan")


def _pairwise_cos_upper(x: np.ndarray, chunk: int = 1024):
    """Yield the cosines of all pairs i < j, chunk by chunk (the full matrix may not fit comfortably)."""
    n = len(x)
    for start in range(0, n - 1, chunk):
        block = x[start:start + chunk] @ x.T
        rows = np.arange(start, min(start + chunk, n))[:, None]
        yield block[np.arange(n)[None, :] > rows]


def sphere_stats(x: np.ndarray, t: float = T) -> dict:
    """Uniformity and the pairwise angles of the (normalised) rows of x, over all pairs i < j."""
    x = _normalise(x)
    n = len(x)
    if n < 2:
        return {"uniformity": float("nan"), "max_angle": float("nan"), "mean_angle": float("nan"),
                "mean_cosine": float("nan"), "n_sentences": n}
    total_exp = total_angle = total_cos = 0.0
    max_angle = 0.0
    for cos in _pairwise_cos_upper(x):
        cos = np.clip(cos, -1.0, 1.0)
        total_exp += float(np.sum(np.exp(-t * (2.0 - 2.0 * cos))))  # ||x-y||^2 = 2 - 2cos on the sphere
        ang = np.degrees(np.arccos(cos))
        total_angle += float(ang.sum())
        total_cos += float(cos.sum())
        max_angle = max(max_angle, float(ang.max()))
    pairs = n * (n - 1) / 2
    return {"uniformity": math.log(total_exp / pairs), "max_angle": max_angle, "mean_angle": total_angle / pairs,
            "mean_cosine": total_cos / pairs, "n_sentences": n}


def analyse(stsb: dict[str, PairSet], embed) -> dict:
    """Alignment, uniformity and cap angles on the given STS-B splits. `embed(list[str])` -> matrix."""
    a, b, gold = [], [], []
    for ps in stsb.values():
        a += ps.a
        b += ps.b
        gold.append(ps.scores)
    gold_all = np.concatenate(gold) if gold else np.zeros(0)
    pos = np.flatnonzero(gold_all > POSITIVE_THRESHOLD)
    sentences = list(dict.fromkeys(a + b))
    out = {"alignment": alignment(embed([a[i] for i in pos]), embed([b[i] for i in pos])),
           **sphere_stats(embed(sentences)), "n_positive_pairs": int(len(pos))}
    return {k: out[k] for k in ("alignment", "uniformity", "max_angle", "mean_angle", "mean_cosine",
                                "n_positive_pairs", "n_sentences")}


class AnalysisEvaluator(Evaluator):
    """The paper's embedding-space figures on STS-B dev+test: alignment (primary; lower is better), uniformity, the
    max / mean pairwise angle."""

    name = section = "analysis"
    primary_metric = "alignment"
    greater_is_better = False
    description = "alignment / uniformity / angles on STS-B dev+test"

    @classmethod
    def protocol(cls, evaluators, context) -> dict:
        return {"stsb_splits": list(ANALYSIS_SPLITS), "positive_threshold": POSITIVE_THRESHOLD, "t": T,
                "normalised": True, "angles": "degrees, over all pairs of distinct sentences"}

    @classmethod
    def table(cls, section: dict, settings: dict, label: str | None = None) -> list[str]:
        return ["Analysis (STS-B dev+test, normalised): "
                f"alignment {section['alignment']:.4f}, uniformity {section['uniformity']:.4f}, "
                f"max angle {section['max_angle']:.2f} deg, mean angle {section['mean_angle']:.2f} deg"]

    def __init__(self, data_dir):
        self.data = {split: D.load_stsb(data_dir, split) for split in ANALYSIS_SPLITS}

    def units(self) -> dict[str, list[str]]:
        return {self.name: [s for ps in self.data.values() for s in ps.sentences()]}

    def score(self, embeddings, encoder=None, **_) -> dict:
        return analyse(self.data, embeddings[self.name])


# ------------------------------------------------------------------------------------------------------ plots
def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def plot_alignment_uniformity(points: list[dict], path) -> Path:
    """Scatter of checkpoints in the (uniformity, alignment) plane, as in Wang & Isola and SimCSE; lower-left
    is better. Each point: {"label", "alignment", "uniformity"}."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 4))
    for p in points:
        ax.scatter(p["uniformity"], p["alignment"], s=30)
        ax.annotate(str(p.get("label", "")), (p["uniformity"], p["alignment"]), textcoords="offset points",
                    xytext=(4, 4), fontsize=8)
    ax.set_xlabel(r"$\ell_{uniform}$")
    ax.set_ylabel(r"$\ell_{align}$")
    ax.set_title("alignment vs uniformity (STS-B)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


COSINE_FIELDS = (("pos_cos", "positive", "-"), ("neg_cos", "random negative", "--"), ("mix_cos", "mixed negative", ":"))


def read_metrics(path) -> list[dict]:
    """Records of a metrics.jsonl; a torn last line (run still writing) or a non-object line is skipped."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def plot_training_cosines(metrics_jsonl_paths: dict, path) -> Path:
    """Positive / random-negative / mixed-negative cosine vs step for one or more runs (colour = run, line
    style = which cosine). Records lacking a field are skipped for that field only."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    colours = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    for i, (label, mpath) in enumerate(metrics_jsonl_paths.items()):
        recs = read_metrics(mpath)
        for key, name, style in COSINE_FIELDS:
            pts = [(r["step"], r[key]) for r in recs
                   if isinstance(r.get("step"), (int, float)) and isinstance(r.get(key), (int, float))]
            if pts:
                xs, ys = zip(*sorted(pts))
                ax.plot(xs, ys, style, color=colours[i % len(colours)], label=f"{label}: {name}")
    ax.set_xlabel("step")
    ax.set_ylabel("cosine similarity")
    ax.grid(alpha=0.3)
    if ax.has_data():
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
