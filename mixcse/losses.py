"""Contrastive objectives of SimCSE and MixCSE as pure functions of two views' embeddings.

Notation (paper, Zhang et al. AAAI 2022): h_i and h'_i are the l2-normalised embeddings of sentence i under two
dropout masks (view 1 and view 2); tau is the temperature; lambda the mixing coefficient.

SimCSE (one direction, anchors from view 1):

    L_i = -log  exp(h_i.h'_i / tau) / C_i,        C_i = sum_j exp(h_i.h'_j / tau)

MixCSE adds, for every j != i, a mixed hard negative built from view 2 under stop-gradient (SG):

    m'_ij = normalize(lambda h'_i + (1 - lambda) h'_j)
    L_i   = -log  exp(h_i.h'_i / tau) / (C_i + sum_{j != i} exp(h_i.SG(m'_ij) / tau))

and symmetrically with h'_i as the anchor and m_ij = normalize(lambda h_i + (1 - lambda) h_j); the loss is the mean
of the two directions. The mixed logits are computed in closed form from N x N matrices, never materialising the
N x N x d mixtures (``mixed_similarities``; tests/reference.py builds them, for checks):

    h_i.m'_ij = (lambda h_i.h'_i + (1 - lambda) h_i.h'_j) / ||lambda h'_i + (1 - lambda) h'_j||
    ||.||^2   = lambda^2 + (1 - lambda)^2 + 2 lambda (1 - lambda) h'_i.h'_j

Stop-gradient in closed form: the mixture is a constant, so gradients may reach h_i only; hence every factor that
comes from view 2 (h'_i, h'_j and their Gram matrix) is detached, while h_i enters linearly.

Every term above belongs to one anchor i, so the loss of a block of anchors (``rows``) needs only rows x N matrices:
the blocks' shares add up to the batch loss, which is how a batch of thousands fits in memory (mixcse/training/step.py).

Two optional terms for adapting an encoder that is already good (both computed from its frozen start model's
embeddings t, docs/domain-adaptation.md):

    exclude_ij = 1  ->  sentence j is neither a negative nor mixed for anchor i (a near-duplicate by t_i.t_j)
    KD_i = KL( softmax_{j != i}(t_i.t_j / tau) || softmax_{j != i}(h_i.h'_j / tau) )      (``distillation_loss``)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

import torch
import torch.nn.functional as F

MixGrad = Literal["stop", "through"]


@dataclass(frozen=True)
class ContrastiveObjective:
    """What to optimise. ``lam=None`` is plain SimCSE; ``directions`` 1 anchors on view 1 only ("single").

    ``mix_grad="through"`` lets gradients flow through the mixed negatives (the paper's "wo-sg" ablation).
    ``lam_bound`` clips lambda per pair so that a mixed negative is never closer to its anchor than the anchor's
    positive (the condition behind the paper's "selection of lambda" analysis).
    ``formulation="released"`` reproduces the released code's loss instead of the paper's (see
    ``released_mixcse_logits`` and docs/released-code.md).
    """

    lam: float | None = 0.2
    temperature: float = 0.05
    directions: int = 2
    mix_grad: MixGrad = "stop"
    lam_bound: bool = False
    formulation: Literal["paper", "released"] = "paper"

    def __post_init__(self) -> None:
        if self.lam is not None and not 0.0 <= self.lam < 1.0:
            raise ValueError(f"lam must be in [0, 1) or None, got {self.lam}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if self.directions not in (1, 2):
            raise ValueError(f"directions must be 1 or 2, got {self.directions}")
        if self.mix_grad not in ("stop", "through"):
            raise ValueError(f"mix_grad must be 'stop' or 'through', got {self.mix_grad!r}")
        if self.formulation not in ("paper", "released"):
            raise ValueError(f"formulation must be 'paper' or 'released', got {self.formulation!r}")

    @property
    def mixes(self) -> bool:
        return self.lam is not None


PRESETS: dict[str, ContrastiveObjective] = {
    "simcse": ContrastiveObjective(lam=None, directions=1),
    "mixcse": ContrastiveObjective(lam=0.2, directions=2, mix_grad="stop"),
    "mixcse-single": ContrastiveObjective(lam=0.2, directions=1, mix_grad="stop"),
    "mixcse-wo-sg": ContrastiveObjective(lam=0.2, directions=2, mix_grad="through"),
    "mixcse-bound": ContrastiveObjective(lam=0.2, directions=2, mix_grad="stop", lam_bound=True),
    # The released code mixes one partner per anchor, unnormalised, in one direction; see docs/released-code.md.
    "mixcse-released": ContrastiveObjective(lam=0.2, directions=1, mix_grad="stop", formulation="released"),
}


def objective_from_preset(name: str, **overrides) -> ContrastiveObjective:
    """A preset with some fields replaced; ``None`` overrides are ignored so config defaults can pass through."""
    if name not in PRESETS:
        raise ValueError(f"unknown loss {name!r}; choose one of {', '.join(PRESETS)}")
    given = {k: v for k, v in overrides.items() if v is not None}
    return replace(PRESETS[name], **given)


@dataclass
class LossOutput:
    """``loss`` is what to minimise; ``simcse_loss`` is the plain InfoNCE on the same similarities (detached) so
    that ``loss - simcse_loss`` is what the mixed negatives add; ``stats`` are detached floats for logging:
    mean positive, random-negative and mixed-negative cosine (the paper's Figure analysis)."""

    loss: torch.Tensor
    simcse_loss: torch.Tensor
    stats: dict[str, torch.Tensor] = field(default_factory=dict)


def mixed_similarities(
    anchor_pos: torch.Tensor, pos_gram: torch.Tensor, lam: float | torch.Tensor,
    positive: torch.Tensor | None = None,
) -> torch.Tensor:
    """h_i . normalize(lam h'_i + (1-lam) h'_j) for all i, j, from S = h.h'^T and G' = h'.h'^T (unit vectors).

    ``lam`` may be a scalar or a tensor of per-pair coefficients. For a block of anchor rows, S and G' hold those
    rows only and ``positive`` (rows x 1) their h_i . h'_i; by default it is the diagonal of a square S.
    """
    if positive is None:
        positive = anchor_pos.diagonal().unsqueeze(1)  # h_i . h'_i, broadcast over j
    numerator = lam * positive + (1.0 - lam) * anchor_pos
    squared_norm = lam**2 + (1.0 - lam) ** 2 + 2.0 * lam * (1.0 - lam) * pos_gram
    return numerator / squared_norm.clamp_min(1e-12).sqrt()


@torch.no_grad()
def bounded_lambda(anchor_pos: torch.Tensor, pos_gram: torch.Tensor, lam: float, iters: int = 30,
                   positive: torch.Tensor | None = None) -> torch.Tensor:
    """Per pair, the largest lambda' in [0, lam] with h_i.m'_ij(lambda') <= h_i.h'_i.

    Along the arc from h'_j (lambda=0) to h'_i (lambda=1) the cosine to h_i is one sinusoid bump, so the set of
    admissible lambda' is an interval [0, lambda*]; bisection finds lambda* without case analysis. Where even
    h'_j alone is closer than the positive (h_i.h'_j > h_i.h'_i), no lambda' keeps the bound and lambda is left as is.
    ``positive`` as in ``mixed_similarities``.
    """
    if positive is None:
        positive = anchor_pos.diagonal().unsqueeze(1)
    ok_at_lam = mixed_similarities(anchor_pos, pos_gram, lam, positive) <= positive
    ok_at_lam |= anchor_pos > positive  # unsatisfiable: keep lambda
    lo = torch.zeros_like(anchor_pos)
    hi = torch.full_like(anchor_pos, lam)
    for _ in range(iters):
        mid = (lo + hi) / 2
        ok = mixed_similarities(anchor_pos, pos_gram, mid, positive) <= positive
        lo = torch.where(ok, mid, lo)
        hi = torch.where(ok, hi, mid)
    return torch.where(ok_at_lam, torch.full_like(anchor_pos, lam), lo)


def _off_diagonal_share(x: torch.Tensor, own: torch.Tensor, n: int) -> torch.Tensor:
    """The share of a block of rows in the mean of the N(N-1) entries j != i, detached (for logging): the rows' sum
    minus their own entries (``own``, rows x 1), over N(N-1). Sums rather than boolean selection, which would build
    an index and make a GPU wait for the host every step."""
    return (x.detach().sum() - own.detach().sum()) / (n * (n - 1))


def _own(x: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """x[i, columns[i]] for every row, as a column (rows x 1)."""
    return x.gather(1, columns.unsqueeze(1))


def _mixed_logits(
    anchors: torch.Tensor, positives: torch.Tensor, rows: slice, own: torch.Tensor, sim: torch.Tensor,
    objective: ContrastiveObjective, excluded: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Mixed-negative logits h_i.m'_ij / tau of the block's anchors (j = i and ``excluded`` pairs removed) and
    logged stats: their mean cosine and, with the bound, the share of pairs j != i whose lambda it lowered (both
    detached, shares).

    A function of its own so that its temporaries are freed on return, before the caller's softmax.
    """
    n = positives.shape[0]
    if objective.mix_grad == "stop":
        mix_sim = anchors @ positives.detach().T  # gradients reach the anchor h_i only
        pos_gram = (positives[rows] @ positives.T).detach()
    else:
        mix_sim, pos_gram = sim, positives[rows] @ positives.T
    lam, stats = objective.lam, {}
    if objective.lam_bound:
        lam = bounded_lambda(sim.detach(), pos_gram.detach(), objective.lam, positive=_own(sim, own).detach())
        clipped = (lam < objective.lam).to(sim.dtype)
        stats["lam_clipped"] = _off_diagonal_share(clipped, _own(clipped, own), n)
    mixed = mixed_similarities(mix_sim, pos_gram, lam, _own(mix_sim, own))
    stats["mix_cos"] = _off_diagonal_share(mixed, _own(mixed, own), n)
    # j = i would mix the positive with itself: not a negative, so it is removed from the denominator.
    logits = (mixed / objective.temperature).scatter(1, own.unsqueeze(1), float("-inf"))
    return (logits if excluded is None else logits.masked_fill(excluded, float("-inf"))), stats


def _one_direction(
    anchors: torch.Tensor, positives: torch.Tensor, objective: ContrastiveObjective, rows: slice,
    exclude: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """The share of anchors ``rows`` in the mean loss of anchors against (positives, in-batch negatives, mixed
    negatives built from ``positives``): the sum of their terms over N. Stats likewise. ``exclude``: as in
    ``contrastive_loss``."""
    n = positives.shape[0]
    tau = objective.temperature
    own = torch.arange(n, device=anchors.device)[rows]  # each anchor's positive: its own column
    anchors = anchors[rows]
    sim = anchors @ positives.T  # S_ij = h_i . h'_j
    excluded = None
    if exclude is not None:  # never the anchor's own positive
        excluded = exclude[rows].to(device=sim.device, dtype=torch.bool).scatter(1, own.unsqueeze(1), False)
    simcse_logits = sim / tau if excluded is None else (sim / tau).masked_fill(excluded, float("-inf"))
    positive = _own(sim, own)
    stats = {"pos_cos": positive.detach().sum() / n, "neg_cos": _off_diagonal_share(sim, positive, n)}
    if not objective.mixes:
        simcse_loss = F.cross_entropy(simcse_logits, own, reduction="sum") / n
        return simcse_loss, simcse_loss.detach(), stats

    with torch.no_grad():  # logged only: no graph, so no saved softmax for it
        simcse_loss = F.cross_entropy(simcse_logits, own, reduction="sum") / n
    mixed_logits, mix_stats = _mixed_logits(anchors, positives, rows, own, sim, objective, excluded)
    stats.update(mix_stats)
    loss = F.cross_entropy(torch.cat([simcse_logits, mixed_logits], dim=1), own, reduction="sum") / n
    return loss, simcse_loss, stats


def released_mixcse_loss(z1: torch.Tensor, z2: torch.Tensor, objective: ContrastiveObjective,
                         rows: slice | None = None) -> LossOutput:
    """What the released code (BDBC-KG-NLP/MixCSE_AAAI2022) computes, reproduced on purpose for comparison.

    One mixing partner per sentence, the next row (k+ = k+1 mod N), mixing the *unnormalised* pooled vectors,
    detached: m_k = lam z2_k + (1-lam) z2_{k+}, mt_k = lam z1_k + (1-lam) z1_{k+}. One N x 3N softmax per view-1
    anchor over [S | A | B] with S_ik = cos(z1_i, z2_k), A_ik = cos(z1_i, m_k), B_ik = cos(mt_i, z2_k), all / tau;
    A[i, i-1] and B[i, i+1] (mixes dominated by the positive) are set to logit 0 - kept in the denominator - not
    removed. ``directions`` and ``mix_grad`` do not apply. docs/released-code.md lists the differences. ``rows`` as
    in ``contrastive_loss``.
    """
    lam, tau = objective.lam or 0.0, objective.temperature
    n = z1.shape[0]
    own = torch.arange(n, device=z1.device)[slice(None) if rows is None else rows]
    h1, h2 = F.normalize(z1, dim=-1), F.normalize(z2, dim=-1)
    mix2 = F.normalize((lam * z2 + (1 - lam) * z2.roll(-1, dims=0)).detach(), dim=-1)
    mix1 = F.normalize((lam * z1 + (1 - lam) * z1.roll(-1, dims=0)).detach(), dim=-1)
    anchors = h1[own]
    sim = anchors @ h2.T
    block_a = (anchors @ mix2.T) / tau
    block_b = (mix1[own] @ h2.T) / tau
    # A[i, i-1] and B[i, i+1] become logit 0 (no gradient), as in the released code.
    logits = torch.cat([sim / tau, block_a.scatter(1, ((own - 1) % n).unsqueeze(1), 0.0),
                        block_b.scatter(1, ((own + 1) % n).unsqueeze(1), 0.0)], dim=1)
    loss = F.cross_entropy(logits, own, reduction="sum") / n
    positive = _own(sim, own)
    stats = {"pos_cos": positive.detach().sum() / n, "neg_cos": _off_diagonal_share(sim, positive, n),
             "mix_cos": (_own(block_a, own) * tau).detach().sum() / n}
    simcse_loss = F.cross_entropy(sim.detach() / tau, own, reduction="sum") / n
    return LossOutput(loss=loss, simcse_loss=simcse_loss, stats=stats)


def contrastive_loss(z1: torch.Tensor, z2: torch.Tensor, objective: ContrastiveObjective,
                     rows: slice | None = None, *, exclude: torch.Tensor | None = None) -> LossOutput:
    """Loss of a batch from its two views. z1, z2: (N, d) pooled embeddings, row i of each = sentence i.

    Embeddings are l2-normalised here (cosine similarity); half-precision inputs are upcast so that cosines and the
    softmax are computed in float32 whatever the autocast dtype (float64 inputs stay float64).

    ``rows`` (a slice of sentences) keeps only the terms of those anchors, in both directions: the result is their
    share of the batch's loss and stats, so the results of disjoint blocks of rows covering the batch add up to the
    whole batch's (loss, gradients and stats), in rows x N memory instead of N x N.

    ``exclude`` (N x N, bool): where True, sentence j is removed from anchor i's denominator, as an in-batch
    negative and as a mixed one, in both directions (a false negative; the diagonal, the positive, is never
    removed). With the paper's formulation only.
    """
    if z1.shape != z2.shape or z1.dim() != 2:
        raise ValueError(f"expected two (N, d) views of equal shape, got {tuple(z1.shape)} and {tuple(z2.shape)}")
    if z1.dtype in (torch.float16, torch.bfloat16):
        z1, z2 = z1.float(), z2.float()
    if objective.formulation == "released":
        if exclude is not None:
            raise ValueError("exclude is defined for the paper's formulation, not the released code's")
        return released_mixcse_loss(z1, z2, objective, rows)
    rows = slice(None) if rows is None else rows
    h1, h2 = F.normalize(z1, dim=-1), F.normalize(z2, dim=-1)
    loss, simcse, stats = _one_direction(h1, h2, objective, rows, exclude)
    if objective.directions == 2:
        loss_b, simcse_b, stats_b = _one_direction(h2, h1, objective, rows, None if exclude is None else exclude.T)
        loss, simcse = (loss + loss_b) / 2, (simcse + simcse_b) / 2
        stats = {k: (v + stats_b[k]) / 2 for k, v in stats.items()}
    return LossOutput(loss=loss, simcse_loss=simcse, stats=stats)


def distillation_loss(z1: torch.Tensor, z2: torch.Tensor, teacher: torch.Tensor, temperature: float,
                      rows: slice | None = None) -> torch.Tensor:
    """KL divergence of the student's in-batch similarity distribution from the frozen start model's, the anchors
    ``rows``' share of its mean over anchors (shares of disjoint blocks add up, as in ``contrastive_loss``).

    For anchor i, over the other sentences j != i of the batch:
        p_ij = softmax_j(t_i.t_j / tau)     the start model's embeddings ``teacher`` (N, d'), l2-normalised
        q_ij = softmax_j(h_i.h'_j / tau)    the student's two views (z1, z2), l2-normalised
        KD   = mean_i KL(p_i || q_i)
    It keeps which in-batch sentences the student finds alike close to what the start model found, so that an
    adapted encoder forgets less of what it knew. ``teacher`` carries no gradient."""
    rows = slice(None) if rows is None else rows
    n = z1.shape[0]
    h1 = F.normalize(z1.float() if z1.dtype in (torch.float16, torch.bfloat16) else z1, dim=-1)
    h2 = F.normalize(z2.float() if z2.dtype in (torch.float16, torch.bfloat16) else z2, dim=-1)
    t = F.normalize(teacher.detach().to(h1.dtype), dim=-1)
    own = torch.arange(n, device=h1.device)[rows].unsqueeze(1)
    student = (h1[rows] @ h2.T / temperature).scatter(1, own, float("-inf"))
    target = (t[rows] @ t.T / temperature).scatter(1, own, float("-inf"))
    log_q, log_p = F.log_softmax(student, dim=1), F.log_softmax(target, dim=1)
    p = log_p.exp()
    return torch.where(p > 0, p * (log_p - log_q), torch.zeros_like(p)).sum() / n


def training_loss(z1: torch.Tensor, z2: torch.Tensor, objective: ContrastiveObjective, rows: slice | None = None, *,
                  exclude: torch.Tensor | None = None, terms=()) -> LossOutput:
    """What a training step minimises: ``contrastive_loss`` (with ``exclude``) plus each of ``terms``, callables
    ``(z1, z2, rows) -> (term, stats)`` that the levers add (mixcse/training/levers/; ``distillation_loss``
    weighted, for one); each term's stats are logged beside the loss's."""
    out = contrastive_loss(z1, z2, objective, rows, exclude=exclude)
    for term in terms:
        added = term(z1, z2, rows)
        if added is not None:  # a lever may add nothing to a batch
            out = LossOutput(out.loss + added[0], out.simcse_loss, {**out.stats, **added[1]})
    return out
