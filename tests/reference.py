"""Reference implementations of the losses, written from the equations with no shortcut: the ground truth that
``mixcse.losses`` (closed form, N x N matrices only) is tested and benchmarked against.

    literal_loss(z1, z2, lam, tau, directions, stop_grad, exclude=None)   loops over anchors, builds every mixed
                                                            vector; ``exclude[i][j]`` drops j from anchor i's terms
    literal_released(z1, z2, lam, tau)                      the released code's loss (docs/released-code.md), loops
    literal_distillation(z1, z2, teacher, tau)              KL of the in-batch similarity distributions, loops
    materialised_mixcse_loss(z1, z2, lam, tau)              the paper's loss with the (N, N, d) mixtures built

All take two (N, d) views, row i of each = sentence i, and return a scalar tensor differentiable in z1 and z2.
Used by tests/test_losses.py.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def literal_direction(z_anchor, z_pos, lam, tau, stop_grad, exclude=None):
    """Loop over anchors and builds every mixed vector m'_ij = normalize(lam h'_i + (1-lam) h'_j) explicitly."""
    h = F.normalize(z_anchor, dim=-1)
    hp = F.normalize(z_pos, dim=-1)
    n = h.shape[0]
    total = 0.0
    for i in range(n):
        kept = [j for j in range(n) if j == i or exclude is None or not exclude[i][j]]
        terms = [h[i] @ hp[j] / tau for j in kept]
        if lam is not None:
            for j in kept:
                if j == i:
                    continue
                m = F.normalize(lam * hp[i] + (1 - lam) * hp[j], dim=0)
                if stop_grad:
                    m = m.detach()
                terms.append(h[i] @ m / tau)
        logits = torch.stack(terms)
        total = total - (logits[kept.index(i)] - torch.logsumexp(logits, dim=0))
    return total / n


def literal_loss(z1, z2, lam, tau, directions, stop_grad, exclude=None):
    loss = literal_direction(z1, z2, lam, tau, stop_grad, exclude)
    if directions == 2:
        transposed = None if exclude is None else [[exclude[j][i] for j in range(len(exclude))]
                                                   for i in range(len(exclude))]
        loss = (loss + literal_direction(z2, z1, lam, tau, stop_grad, transposed)) / 2
    return loss


def literal_distillation(z1, z2, teacher, tau):
    """mean_i KL(p_i || q_i) over j != i: p from the teacher's cosines, q from the student's h_i.h'_j."""
    h, hp, t = (F.normalize(x, dim=-1) for x in (z1, z2, teacher))
    n = h.shape[0]
    total = 0.0
    for i in range(n):
        others = [j for j in range(n) if j != i]
        log_q = torch.log_softmax(torch.stack([h[i] @ hp[j] / tau for j in others]), dim=0)
        log_p = torch.log_softmax(torch.stack([t[i] @ t[j] / tau for j in others]), dim=0)
        total = total + (log_p.exp() * (log_p - log_q)).sum()
    return total / n


def literal_released(z1, z2, lam, tau):
    """The released code's loss, written from its description in docs/released-code.md as plain loops."""
    n = z1.shape[0]
    total = 0.0
    cos = lambda a, b: F.cosine_similarity(a, b, dim=0)  # noqa: E731
    m2 = [(lam * z2[k] + (1 - lam) * z2[(k + 1) % n]).detach() for k in range(n)]
    m1 = [(lam * z1[k] + (1 - lam) * z1[(k + 1) % n]).detach() for k in range(n)]
    for i in range(n):
        s = [cos(z1[i], z2[k]) / tau for k in range(n)]
        a = [cos(z1[i], m2[k]) / tau * (0.0 if k == (i - 1) % n else 1.0) for k in range(n)]
        b = [cos(m1[i], z2[k]) / tau * (0.0 if k == (i + 1) % n else 1.0) for k in range(n)]
        logits = torch.stack(s + a + b)
        total = total - (logits[i] - torch.logsumexp(logits, 0))
    return total / n


def materialised_mixcse_loss(z1: torch.Tensor, z2: torch.Tensor, lam: float = 0.2, tau: float = 0.05) -> torch.Tensor:
    """The paper's MixCSE loss (both directions, stop-gradient on the mixtures) with the mixtures materialised.

    m'_ij = normalize(lam h'_i + (1 - lam) h'_j) is built as an (N, N, d) tensor; the mixed logit is h_i . m'_ij.
    Written to be as lean as a materialising implementation can be without chunking: mixtures built under no_grad
    (they are constants), normalised in place, contracted with a batched mat-vec (no copy), so the reference's
    peak is about one (N, N, d) tensor per direction (both are kept for backward).
    """
    h1, h2 = F.normalize(z1, dim=-1), F.normalize(z2, dim=-1)
    n = h1.shape[0]
    labels = torch.arange(n)
    eye = torch.eye(n, dtype=torch.bool)

    def one_direction(anchors: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        sim = anchors @ positives.T
        with torch.no_grad():
            p = positives.detach()
            mix = lam * p.unsqueeze(1) + (1.0 - lam) * p.unsqueeze(0)  # mix[i, j] = lam h'_i + (1 - lam) h'_j
            mix.div_(torch.linalg.vector_norm(mix, dim=-1, keepdim=True).clamp_min_(1e-12))
        mixed = (mix @ anchors.unsqueeze(-1)).squeeze(-1)  # mixed[i, j] = h_i . m'_ij
        mixed = mixed.masked_fill(eye, float("-inf"))  # j = i is the positive mixed with itself: not a negative
        return F.cross_entropy(torch.cat([sim / tau, mixed / tau], dim=1), labels)

    return (one_direction(h1, h2) + one_direction(h2, h1)) / 2
