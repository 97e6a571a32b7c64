"""The closed-form losses against literal implementations of the paper's equations (float64, fixed seed)."""

import math

import pytest
import torch
import torch.nn.functional as F
from reference import literal_distillation, literal_loss, literal_released, materialised_mixcse_loss

from mixcse.losses import (
    PRESETS,
    ContrastiveObjective,
    bounded_lambda,
    contrastive_loss,
    distillation_loss,
    mixed_similarities,
    objective_from_preset,
    training_loss,
)

pytestmark = pytest.mark.numeric  # rerun on other arithmetic paths (docs/development.md)


def views(n=7, d=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    z1 = torch.randn(n, d, dtype=torch.float64, generator=g)
    z2 = z1 + 0.3 * torch.randn(n, d, dtype=torch.float64, generator=g)  # correlated, like two dropout views
    return z1.requires_grad_(), z2.requires_grad_()


def fast_loss(z1, z2, objective):
    return contrastive_loss(z1, z2, objective).loss


@pytest.mark.parametrize("preset", ["simcse", "mixcse", "mixcse-single", "mixcse-wo-sg"])
@pytest.mark.parametrize("lam", [0.2, 0.5])
def test_closed_form_equals_literal(preset, lam):
    objective = objective_from_preset(preset, lam=None if preset == "simcse" else lam)
    z1, z2 = views()
    fast = fast_loss(z1, z2, objective)
    g_fast = torch.autograd.grad(fast, (z1, z2))
    ref = literal_loss(z1, z2, objective.lam, objective.temperature, objective.directions,
                       objective.mix_grad == "stop")
    g_ref = torch.autograd.grad(ref, (z1, z2))
    assert abs(fast.item() - ref.item()) <= 1e-10
    for a, b in zip(g_fast, g_ref):
        assert torch.allclose(a, b, atol=1e-10, rtol=0)


def test_simcse_matches_cross_entropy_definition():
    z1, z2 = views(seed=3)
    h1, h2 = F.normalize(z1.float(), dim=-1), F.normalize(z2.float(), dim=-1)
    expected = F.cross_entropy(h1 @ h2.T / 0.05, torch.arange(7))
    assert torch.allclose(contrastive_loss(z1.float(), z2.float(), PRESETS["simcse"]).loss, expected, atol=1e-6)


@pytest.mark.parametrize("anchor_view", [0, 1])
def test_stop_gradient_sends_nothing_through_the_mixture(anchor_view):
    """The mixed logits h_i.SG(m'_ij) as the loss computes them reach the anchor view only, in either direction."""
    z = views(seed=1)
    anchors, mixed_from = z[anchor_view], z[1 - anchor_view]
    h, hm = F.normalize(anchors, dim=-1), F.normalize(mixed_from, dim=-1)
    mixed_term = mixed_similarities(h @ hm.detach().T, (hm @ hm.T).detach(), 0.2).sum()
    g_anchor, g_mix = torch.autograd.grad(mixed_term, (anchors, mixed_from), allow_unused=True)
    assert g_mix is None and g_anchor.abs().max() > 0
    # In the whole loss the gradient into the mixed-from view is exactly that of the literal SG loss, and differs
    # from the no-SG ("wo-sg") gradient: the mixture's own path is cut.
    z1, z2 = z
    sg = torch.autograd.grad(contrastive_loss(z1, z2, PRESETS["mixcse-single"]).loss, z2)[0]
    ref = torch.autograd.grad(literal_loss(z1, z2, 0.2, 0.05, 1, stop_grad=True), z2)[0]
    through = torch.autograd.grad(literal_loss(z1, z2, 0.2, 0.05, 1, stop_grad=False), z2)[0]
    assert torch.allclose(sg, ref, atol=1e-10)
    assert (through - ref).abs().max() > 1e-4


def test_mixed_logit_limit_claim():
    """h_i.h'_i = 1, h_i.h'_j = 0, h'_i.h'_j = 0 gives h_i.m'_ij = lam / sqrt(lam^2 + (1-lam)^2) (about 0.24 at
    lam 0.2): the closed form against the mixture built as a vector, then near-orthogonal random views."""
    eye = torch.eye(6, dtype=torch.float64)  # h = h' = the unit vectors: the limit holds exactly
    closed = mixed_similarities(eye @ eye.T, eye @ eye.T, 0.2)
    built = torch.stack([torch.stack([F.normalize(0.2 * eye[i] + 0.8 * eye[j], dim=0) @ eye[i] for j in range(6)])
                         for i in range(6)])
    off = ~torch.eye(6, dtype=torch.bool)
    assert torch.allclose(closed[off], built[off], atol=1e-12)
    assert closed[off].min().item() == pytest.approx(0.2 / math.hypot(0.2, 0.8), abs=1e-12) \
        == pytest.approx(0.2425356, abs=1e-7)
    d = 4096
    g = torch.Generator().manual_seed(0)
    h = F.normalize(torch.randn(32, d, dtype=torch.float64, generator=g), dim=-1)
    hp = F.normalize(h + 1e-4 * torch.randn(32, d, dtype=torch.float64, generator=g), dim=-1)
    mixed = mixed_similarities(h @ hp.T, hp @ hp.T, 0.2)
    off = ~torch.eye(32, dtype=torch.bool)
    assert (mixed[off] - built[0, 1]).abs().max() < 0.05  # random high-dimensional vectors are nearly orthogonal
    assert mixed[off].mean().item() == pytest.approx(built[0, 1].item(), abs=5e-3)
    assert (h @ hp.T)[off].abs().mean() < 0.05  # while the random negatives themselves carry ~0


def test_lam_bound_keeps_mixed_negatives_below_the_positive():
    z1, z2 = views(n=32, d=6, seed=2)
    h1, h2 = F.normalize(z1.detach(), dim=-1), F.normalize(z2.detach(), dim=-1)
    s, gram = h1 @ h2.T, h2 @ h2.T
    lam = bounded_lambda(s, gram, 0.5)
    pos = s.diagonal().unsqueeze(1)
    satisfiable = s <= pos
    mixed = mixed_similarities(s, gram, lam)
    assert (mixed[satisfiable] <= pos.expand_as(s)[satisfiable] + 1e-9).all()
    assert (lam <= 0.5).all() and (lam >= 0).all()
    # lambda* is the largest admissible value: a brute-force grid never finds a larger one.
    grid = torch.linspace(0, 0.5, 501, dtype=torch.float64)
    for i, j in [(0, 1), (3, 7), (10, 2), (5, 30)]:
        if not satisfiable[i, j]:
            continue
        ok = [g.item() for g in grid if mixed_similarities(s, gram, g)[i, j] <= s[i, i] + 1e-12]
        assert lam[i, j].item() >= max(ok) - 1e-3
    # Unconstrained pairs keep lambda unchanged, and the bounded preset runs end to end.
    assert torch.isclose(lam[~satisfiable], torch.tensor(0.5, dtype=torch.float64)).all()
    assert torch.isfinite(contrastive_loss(z1, z2, PRESETS["mixcse-bound"]).loss)


def test_lam_bound_logs_the_share_of_clipped_pairs():
    z1, z2 = views(n=32, d=6, seed=2)  # low dimension: many pairs are closer than the positive
    bound = ContrastiveObjective(lam=0.5, lam_bound=True)
    h1, h2 = F.normalize(z1.detach(), dim=-1), F.normalize(z2.detach(), dim=-1)
    off = ~torch.eye(32, dtype=torch.bool)
    share = [(bounded_lambda(a @ b.T, b @ b.T, 0.5)[off] < 0.5).double().mean() for a, b in ((h1, h2), (h2, h1))]
    expected = (share[0] + share[1]) / 2  # the two directions, averaged like every logged stat
    stats = contrastive_loss(z1, z2, bound).stats
    assert 0 < expected < 1 and stats["lam_clipped"].item() == pytest.approx(expected.item())
    assert "lam_clipped" not in contrastive_loss(z1, z2, PRESETS["mixcse"]).stats


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("block", [1, 3, 7])
def test_blocks_of_anchors_add_up_to_the_batch(preset, block):
    """Losses, gradients and stats of disjoint anchor blocks (``rows``) sum to the whole batch's: what lets the
    cached step compute the loss of thousands of sentences in rows x N memory."""
    z1, z2 = views(n=7)
    whole = contrastive_loss(z1, z2, PRESETS[preset])
    g_whole = torch.autograd.grad(whole.loss, (z1, z2))
    parts = [contrastive_loss(z1, z2, PRESETS[preset], rows=slice(s, s + block)) for s in range(0, 7, block)]
    g_parts = torch.autograd.grad(sum(p.loss for p in parts), (z1, z2))
    assert len(parts) == -(-7 // block)
    assert sum(p.loss for p in parts).item() == pytest.approx(whole.loss.item(), rel=1e-12)
    assert sum(p.simcse_loss for p in parts).item() == pytest.approx(whole.simcse_loss.item(), rel=1e-12)
    for a, b in zip(g_parts, g_whole):
        assert torch.allclose(a, b, atol=1e-12, rtol=1e-10)
    assert set(whole.stats) == set(parts[0].stats)
    for key, value in whole.stats.items():
        assert sum(p.stats[key] for p in parts).item() == pytest.approx(value.item(), rel=1e-10, abs=1e-12), key
    if block < 7:  # a lone block is not the batch: its share is smaller than the whole
        assert abs(parts[0].loss.item()) < abs(whole.loss.item())


def test_materialised_reference_equals_the_literal_one():
    z1, z2 = views(n=6, d=4, seed=5)
    mat = materialised_mixcse_loss(z1, z2, 0.2, 0.05)
    ref = literal_loss(z1, z2, 0.2, 0.05, 2, stop_grad=True)
    assert abs(mat.item() - ref.item()) < 1e-10
    for a, b in zip(torch.autograd.grad(mat, (z1, z2)), torch.autograd.grad(ref, (z1, z2))):
        assert torch.allclose(a, b, atol=1e-10)


def test_released_formulation_matches_its_description():
    z1, z2 = views(n=6, d=4, seed=4)
    obj = PRESETS["mixcse-released"]
    fast = fast_loss(z1, z2, obj)
    ref = literal_released(z1, z2, obj.lam, obj.temperature)
    assert abs(fast.item() - ref.item()) < 1e-10
    for a, b in zip(torch.autograd.grad(fast, (z1, z2)), torch.autograd.grad(ref, (z1, z2))):
        assert torch.allclose(a, b, atol=1e-10)


def test_mixing_keeps_the_gradient_alive_when_negatives_are_orthogonal():
    """The paper's motivation: once negatives are ~orthogonal SimCSE's gradient vanishes, MixCSE's does not."""
    d = 512
    g = torch.Generator().manual_seed(0)
    base = F.normalize(torch.randn(16, d, generator=g), dim=-1)
    z1 = base.clone().requires_grad_()
    z2 = (base + 1e-3 * torch.randn(16, d, generator=g)).requires_grad_()
    g_simcse = torch.autograd.grad(contrastive_loss(z1, z2, PRESETS["simcse"]).loss, z1)[0].norm()
    g_mixcse = torch.autograd.grad(contrastive_loss(z1, z2, PRESETS["mixcse-single"]).loss, z1)[0].norm()
    assert g_mixcse > 10 * g_simcse


def test_objective_validation():
    with pytest.raises(ValueError):
        ContrastiveObjective(lam=1.0)
    with pytest.raises(ValueError):
        ContrastiveObjective(directions=3)
    with pytest.raises(ValueError):
        ContrastiveObjective(mix_grad="sometimes")
    with pytest.raises(ValueError):
        objective_from_preset("mixcse-v2")
    with pytest.raises(ValueError):
        contrastive_loss(torch.zeros(3, 2), torch.zeros(4, 2), PRESETS["mixcse"])
    assert objective_from_preset("mixcse", lam=None).lam == 0.2  # None means "keep the preset's value"


# ------------------------------------------------------------------------------------------------ adaptation terms
def near_duplicates(n=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(n, n, generator=g) < 0.3
    return (mask | mask.T).fill_diagonal_(True)  # symmetric, like a similarity threshold; the diagonal is ignored


@pytest.mark.parametrize("preset", ["simcse", "mixcse", "mixcse-single", "mixcse-wo-sg"])
def test_excluded_negatives_equal_the_literal_loop_without_them(preset):
    objective = PRESETS[preset]
    exclude = near_duplicates()
    z1, z2 = views()
    fast = contrastive_loss(z1, z2, objective, exclude=exclude).loss
    g_fast = torch.autograd.grad(fast, (z1, z2))
    z1r, z2r = views()
    ref = literal_loss(z1r, z2r, objective.lam, objective.temperature, objective.directions,
                       objective.mix_grad == "stop", exclude=exclude.tolist())
    g_ref = torch.autograd.grad(ref, (z1r, z2r))
    assert torch.allclose(fast, ref, atol=1e-10)
    assert all(torch.allclose(a, b, atol=1e-10) for a, b in zip(g_fast, g_ref))
    # nothing excluded is the plain loss; blocks of anchors add up to the batch
    assert torch.allclose(contrastive_loss(z1, z2, objective, exclude=torch.zeros(7, 7, dtype=torch.bool)).loss,
                          contrastive_loss(z1, z2, objective).loss, atol=1e-12)
    blocks = sum(contrastive_loss(z1, z2, objective, slice(a, a + 3), exclude=exclude).loss for a in (0, 3, 6))
    assert torch.allclose(blocks, fast, atol=1e-12)
    assert not torch.allclose(fast, contrastive_loss(z1, z2, objective).loss)


def test_distillation_equals_the_literal_loop_and_vanishes_when_the_student_agrees():
    z1, z2 = views()
    teacher = torch.randn(7, 9, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    fast = distillation_loss(z1, z2, teacher, 0.05)
    grads = torch.autograd.grad(fast, (z1, z2))
    z1r, z2r = views()
    ref = literal_distillation(z1r, z2r, teacher, 0.05)
    assert torch.allclose(fast, ref, atol=1e-10)
    assert all(torch.allclose(a, b, atol=1e-10) for a, b in zip(grads, torch.autograd.grad(ref, (z1r, z2r))))
    assert fast.item() > 0.1
    same = teacher[:, :5].clone().requires_grad_()  # student views that are the teacher: KL 0
    assert distillation_loss(same, same, teacher[:, :5], 0.05).item() == pytest.approx(0.0, abs=1e-12)
    parts = sum(distillation_loss(z1, z2, teacher, 0.05, slice(a, a + 4)) for a in (0, 4))
    assert torch.allclose(parts, fast, atol=1e-12)
    def distill(a, b, rows):  # the term the distillation lever adds (mixcse/training/levers/distillation.py)
        kd = distillation_loss(a, b, teacher, 0.05, rows)
        return 0.5 * kd, {"distill_loss": kd.detach()}

    total = training_loss(z1, z2, PRESETS["mixcse"], terms=[distill])
    plain = contrastive_loss(z1, z2, PRESETS["mixcse"])
    assert torch.allclose(total.loss, plain.loss + 0.5 * fast, atol=1e-12)
    assert torch.allclose(total.stats["distill_loss"], fast.detach())
