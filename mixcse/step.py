"""One optimisation step of contrastive training, shared by the trainer and every benchmark that replays it.

Interface::

    step = make_step(cfg, ctx, model, optimizer, objective, scaler=None, precision=None, length_buckets=None)
    result = step(batch, mark=None)     # -> StepResult

``batch`` is this rank's slice of the global batch, one view of token tensors (``input_ids``, ``attention_mask``,
...). A call makes the two dropout views, computes the loss of the global batch, back-propagates, clips and updates
the parameters, and leaves the gradients zeroed. It never waits for the device (no ``.item()``): the caller decides
when to read ``result``. The learning-rate schedule stays with the caller.

``StepResult.loss`` is the ``LossOutput`` with every tensor detached; ``StepResult.embedding_grad`` is the gradient
of the loss with respect to this rank's pooled embeddings (2N x d, view 1 rows then view 2 rows), unscaled by any
loss scaler; ``StepResult.anchor_grad_norm()`` reduces it to the logged figure.

``mark(name)``, when given, is called after each phase ("forward", "loss", "backward", "clip", "optimizer",
"zero_grad") so that a profiler can time them. Another step (e.g. a gradient-cached one) implements the same
``__call__`` and may name its phases differently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from . import distributed
from .config import TrainConfig
from .distributed import DistContext
from .losses import ContrastiveObjective, LossOutput, contrastive_loss

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class StepResult:
    loss: LossOutput  # detached
    embedding_grad: torch.Tensor  # d loss / d pooled embeddings of this rank's 2N rows, not multiplied by a scale

    def anchor_grad_norm(self) -> torch.Tensor:
        """Mean over anchors of the gradient norm at each embedding, times N: undoes the loss's 1/N mean, so the
        figure does not shrink with the batch size."""
        n = self.embedding_grad.shape[0] // 2
        return self.embedding_grad.float().norm(dim=-1).mean() * n


class Step(Protocol):
    def __call__(self, batch: dict[str, torch.Tensor], *,
                 mark: Callable[[str], None] | None = None) -> StepResult: ...


def _no_mark(name: str) -> None:
    pass


class PlainStep:
    """Both views in one forward pass, the loss on the embeddings, then one backward pass through the encoder.

    The backward runs in two stages, first from the loss to the embeddings and then from the embeddings through the
    encoder, so the embedding gradient is a result of the step rather than a retained intermediate; the gradient
    each parameter receives is the one a single backward pass computes.
    """

    def __init__(self, ctx: DistContext, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 objective: ContrastiveObjective, *, scaler: torch.amp.GradScaler | None = None,
                 autocast_dtype: torch.dtype | None = None, length_buckets: int = 1,
                 max_grad_norm: float | None = None):
        self.ctx, self.model, self.optimizer, self.objective = ctx, model, optimizer, objective
        self.scaler, self.autocast_dtype = scaler, autocast_dtype
        self.length_buckets, self.max_grad_norm = length_buckets, max_grad_norm

    def __call__(self, batch: dict[str, torch.Tensor], *, mark: Callable[[str], None] | None = None) -> StepResult:
        mark = mark or _no_mark
        ctx, scaler = self.ctx, self.scaler
        views = {k: torch.cat([v, v]).to(ctx.device, non_blocking=True) for k, v in batch.items()}  # two views
        n = views["input_ids"].shape[0] // 2
        with torch.autocast(ctx.device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None):
            pooled = self.model(views, length_buckets=self.length_buckets)
        mark("forward")
        embeddings = pooled.detach().requires_grad_()
        z1 = distributed.gather_with_local_grad(embeddings[:n], ctx)
        z2 = distributed.gather_with_local_grad(embeddings[n:], ctx)
        out = contrastive_loss(z1, z2, self.objective)
        loss = out.loss * ctx.world_size  # DDP averages gradients; the local slice's gradient is complete
        mark("loss")
        (scaler.scale(loss) if scaler is not None else loss).backward()
        pooled.backward(embeddings.grad)
        mark("backward")
        if scaler is not None:
            scaler.unscale_(self.optimizer)
        if self.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        mark("clip")
        embedding_grad = embeddings.grad
        if scaler is not None:
            embedding_grad = embedding_grad / scaler.get_scale()  # before update() changes the scale
            scaler.step(self.optimizer)
            scaler.update()
        else:
            self.optimizer.step()
        mark("optimizer")
        self.optimizer.zero_grad(set_to_none=True)
        mark("zero_grad")
        detached = LossOutput(out.loss.detach(), out.simcse_loss.detach(),
                              {k: v.detach() for k, v in out.stats.items()})
        return StepResult(detached, embedding_grad)


def make_step(cfg: TrainConfig, ctx: DistContext, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
              objective: ContrastiveObjective | None = None, scaler: torch.amp.GradScaler | None = None, *,
              precision: str | None = None, length_buckets: int | None = None) -> Step:
    """The step ``cfg`` describes: its clipping norm, its forward buckets on ``ctx.device`` and its precision.

    ``model`` is the encoder, or its DistributedDataParallel wrapper. ``objective`` defaults to ``cfg``'s;
    ``precision`` to ``cfg.precision``, which must then be resolved already ("auto" is the trainer's to resolve);
    ``length_buckets`` to ``cfg.forward_buckets(device)``. fp16 needs ``scaler``.
    """
    precision = precision or cfg.precision
    if precision not in ("fp32", *AUTOCAST_DTYPES):
        raise ValueError(f"precision must be fp32, bf16 or fp16 here, got {precision!r}")
    return PlainStep(ctx, model, optimizer, objective or cfg.objective(), scaler=scaler,
                     autocast_dtype=AUTOCAST_DTYPES.get(precision),
                     length_buckets=length_buckets or cfg.forward_buckets(ctx.device.type),
                     max_grad_norm=cfg.max_grad_norm)
