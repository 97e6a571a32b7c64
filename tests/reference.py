"""Reference implementations of the losses, written from the equations with no shortcut: the ground truth that
``mixcse.losses`` (closed form, N x N matrices only) is tested and benchmarked against.

    literal_loss(z1, z2, lam, tau, directions, stop_grad)   loops over anchors, builds every mixed vector
    literal_released(z1, z2, lam, tau)                      the released code's loss (docs/released-code.md), loops

All take two (N, d) views, row i of each = sentence i, and return a scalar tensor differentiable in z1 and z2.
Used by tests/test_losses.py (with ``mixcse.losses.materialised_mixcse_loss``, the (N, N, d) form).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def literal_direction(z_anchor, z_pos, lam, tau, stop_grad):
    """Loop over anchors and builds every mixed vector m'_ij = normalize(lam h'_i + (1-lam) h'_j) explicitly."""
    h = F.normalize(z_anchor, dim=-1)
    hp = F.normalize(z_pos, dim=-1)
    n = h.shape[0]
    total = 0.0
    for i in range(n):
        terms = [h[i] @ hp[j] / tau for j in range(n)]
        if lam is not None:
            for j in range(n):
                if j == i:
                    continue
                m = F.normalize(lam * hp[i] + (1 - lam) * hp[j], dim=0)
                if stop_grad:
                    m = m.detach()
                terms.append(h[i] @ m / tau)
        logits = torch.stack(terms)
        total = total - (logits[i] - torch.logsumexp(logits, dim=0))
    return total / n


def literal_loss(z1, z2, lam, tau, directions, stop_grad):
    loss = literal_direction(z1, z2, lam, tau, stop_grad)
    if directions == 2:
        loss = (loss + literal_direction(z2, z1, lam, tau, stop_grad)) / 2
    return loss


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
