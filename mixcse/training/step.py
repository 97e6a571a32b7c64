"""One optimisation step of contrastive training, shared by the trainer and every benchmark that replays it.

Interface::

    step = make_step(cfg, ctx, model, optimizer, objective, scaler=None, precision=None, length_buckets=None)
    result = step(batch, mark=None, signals=None)     # -> StepResult

``batch`` is this rank's slice of the global batch, one view of token tensors (``input_ids``, ``attention_mask``,
...). A call makes the two dropout views, computes the loss of the global batch, back-propagates, clips and updates
the parameters, and leaves the gradients zeroed. It never waits for the device (no ``.item()``): the caller decides
when to read ``result``. The learning-rate schedule stays with the caller.

``StepResult.loss`` is the ``LossOutput`` with every tensor detached; ``StepResult.embedding_grad`` is the gradient
of the loss with respect to this rank's pooled embeddings (2N x d, view 1 rows then view 2 rows), unscaled by any
loss scaler and, under DDP, times the world size (each rank back-propagates world_size x the loss, which DDP
averages); ``StepResult.anchor_grad_norm()`` reduces it to the logged figure.

``signals``, when given, holds what the levers say of the global batch (mixcse/training/levers/): ``exclude``
(N x N bool, pairs that are not negatives) and the tensors of their loss terms (``levers``: those with a
``loss_term``); the loss is ``mixcse.losses.training_loss``.

``mark(name)``, when given, is called after each phase ("forward", "loss", "backward", "clip", "optimizer",
"zero_grad") so that a profiler can time them.

Two steps implement this interface: ``PlainStep`` (one forward pass over both views of the batch) and
``CachedStep`` (``mini_batch_size`` set: the same gradients in the memory of a chunk, by gradient caching).
With ``compile`` set, the encoder is ``torch.compile``d and every batch is padded to ``max_seq_length`` (static
shapes).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from mixcse.losses import ContrastiveObjective, LossOutput, training_loss
from mixcse.training import distributed
from mixcse.training.config import TrainConfig
from mixcse.training.distributed import DistContext

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# Entries of each rows x N matrix of a loss block in the cached step (float32: 16 MiB), whatever the batch size.
LOSS_BLOCK_ENTRIES = 2**22


@dataclass
class StepResult:
    loss: LossOutput  # detached
    embedding_grad: torch.Tensor  # world_size x d loss / d pooled embeddings of this rank's 2N rows, no loss scale

    def anchor_grad_norm(self) -> torch.Tensor:
        """Mean over anchors of the gradient norm at each embedding, times the global N: undoes the loss's 1/N mean,
        so the figure does not shrink with the batch size (under DDP the world-size factor of ``embedding_grad``
        times this rank's N is the global N)."""
        n = self.embedding_grad.shape[0] // 2
        return self.embedding_grad.float().norm(dim=-1).mean() * n


class Step(Protocol):
    def __call__(self, batch: dict[str, torch.Tensor], *, mark: Callable[[str], None] | None = None,
                 signals: dict[str, torch.Tensor] | None = None) -> StepResult: ...


def _no_mark(name: str) -> None:
    pass


class _StepBase:
    """What every step shares: the setting, and the tail (unscale, clip, optimizer step, zero the gradients)."""

    def __init__(self, ctx: DistContext, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 objective: ContrastiveObjective, *, scaler: torch.amp.GradScaler | None = None,
                 autocast_dtype: torch.dtype | None = None, length_buckets: int = 1,
                 max_grad_norm: float | None = None, pad_to: int | None = None, levers=()):
        self.ctx, self.model, self.optimizer, self.objective = ctx, model, optimizer, objective
        self.scaler, self.autocast_dtype = scaler, autocast_dtype
        self.length_buckets, self.max_grad_norm, self.pad_to = length_buckets, max_grad_norm, pad_to
        self.levers = tuple(levers)  # the levers that add a loss term

    def _terms(self, z1: torch.Tensor, z2: torch.Tensor, signals: dict | None, rows: slice | None = None
               ) -> LossOutput:
        """The loss of anchors ``rows`` (all: None) of the global batch (z1, z2) with the levers' signals."""
        signals = signals or {}
        exclude = signals.get("exclude")
        terms = [lambda a, b, r, lever=lever: lever.loss_term(a, b, signals, self.objective, r)
                 for lever in self.levers]
        return training_loss(z1, z2, self.objective, rows, exclude=None if exclude is None else exclude.to(z1.device),
                             terms=terms)

    def _autocast(self):
        return torch.autocast(self.ctx.device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None)

    def _views(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Both views as one tensor batch on the device: view 1 = the anchors, view 2 = their positives when the
        batch has ``positive_*`` tensors (``data.PairedCorpus``), else the anchors again (dropout makes them
        differ). Padded to a common width, or to ``pad_to`` when set (static shapes for a compiled model)."""
        anchors = {k: v for k, v in batch.items() if not k.startswith("positive_")}
        positives = {k[len("positive_"):]: v for k, v in batch.items() if k.startswith("positive_")} or anchors
        width = max(anchors["input_ids"].shape[1], positives["input_ids"].shape[1], self.pad_to or 0)
        pad = torch.nn.functional.pad  # mask 0 on padding: never attended
        return {k: torch.cat([pad(anchors[k], (0, width - anchors[k].shape[1])),
                              pad(positives[k], (0, width - positives[k].shape[1]))]).to(self.ctx.device,
                                                                                        non_blocking=True)
                for k in anchors}

    def _loss(self, z1: torch.Tensor, z2: torch.Tensor, signals: dict | None = None
              ) -> tuple[LossOutput, torch.Tensor]:
        """The loss of the global batch from this rank's two views; backward fills ``z1.grad`` and ``z2.grad``."""
        out = self._terms(distributed.gather_with_local_grad(z1, self.ctx),
                          distributed.gather_with_local_grad(z2, self.ctx), signals)
        loss = out.loss * self.ctx.world_size  # DDP averages gradients; the local slice's gradient is complete
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        return out, loss

    def _update(self, out: LossOutput, embedding_grad: torch.Tensor, mark: Callable[[str], None]) -> StepResult:
        scaler = self.scaler
        if scaler is not None:
            scaler.unscale_(self.optimizer)
        if self.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        mark("clip")
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


class PlainStep(_StepBase):
    """Both views in one forward pass, the loss on the embeddings, then one backward pass through the encoder.

    The backward runs in two stages, first from the loss to the embeddings and then from the embeddings through the
    encoder, so the embedding gradient is a result of the step rather than a retained intermediate; the gradient
    each parameter receives is the one a single backward pass computes.
    """

    def __call__(self, batch: dict[str, torch.Tensor], *, mark: Callable[[str], None] | None = None,
                 signals: dict[str, torch.Tensor] | None = None) -> StepResult:
        mark = mark or _no_mark
        views = self._views(batch)
        n = views["input_ids"].shape[0] // 2
        with self._autocast():
            pooled = self.model(views, length_buckets=self.length_buckets)
        mark("forward")
        embeddings = pooled.detach().requires_grad_()
        out, _ = self._loss(embeddings[:n], embeddings[n:], signals)
        mark("loss")
        pooled.backward(embeddings.grad)
        mark("backward")
        return self._update(out, embeddings.grad, mark)


def rng_snapshot(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The generator state every dropout mask of a forward pass is drawn from: torch's CPU generator (which also
    seeds the numpy masks of mixcse/models/dropout.py) and, on CUDA, the device's."""
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def rng_restore(snapshot: tuple[torch.Tensor, torch.Tensor | None], device: torch.device) -> None:
    torch.set_rng_state(snapshot[0])
    if snapshot[1] is not None:
        torch.cuda.set_rng_state(snapshot[1], device)


class CachedStep(_StepBase):
    """Gradient caching (GradCache, Gao et al. 2021): the loss of a batch of N sentences in the memory of K.

    1. Embed: each chunk of K sentences (both views, 2K rows) goes through the encoder without a graph; the RNG
       state is recorded before each chunk.
    2. Loss: the whole batch's loss on the cached 2N embeddings (gathered from every rank under DDP), and its
       gradient with respect to them, computed in blocks of anchors (``loss_block_rows``, by default as many as
       keep each block's rows x N matrices at ``LOSS_BLOCK_ENTRIES``) so the loss's memory grows with N, not N^2.
    3. Replay: each chunk is encoded again from its recorded RNG state, so it draws the same dropout masks (torch's
       and the numpy ones), and back-propagated with its slice of the cached gradient. Parameter gradients add up
       over the chunks to those of one graph over the whole batch; DDP reduces them once, after the last chunk.
    Afterwards the RNG continues from where step 1 left it, as if the replay had not drawn anything.

    Memory: activations of one chunk, 2N embeddings and one block of the loss. Time: one extra forward pass
    without a graph.
    """

    def __init__(self, *args, mini_batch_size: int, loss_block_rows: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.mini_batch_size, self.loss_block_rows = mini_batch_size, loss_block_rows

    def _blocked_loss(self, z1: torch.Tensor, z2: torch.Tensor, signals: dict | None = None
                      ) -> tuple[LossOutput, torch.Tensor, torch.Tensor]:
        """The global batch's loss and the gradient of (loss x world size, scaled) with respect to this rank's
        ``z1`` and ``z2``, one block of anchors at a time: each block's graph is freed by its backward pass."""
        ctx = self.ctx
        all1 = distributed.gather_with_local_grad(z1.detach(), ctx).requires_grad_()
        all2 = distributed.gather_with_local_grad(z2.detach(), ctx).requires_grad_()
        n = all1.shape[0]
        block = self.loss_block_rows or max(1, LOSS_BLOCK_ENTRIES // n)
        parts = []
        for start in range(0, n, block):
            out = self._terms(all1, all2, signals, rows=slice(start, start + block))
            loss = out.loss * ctx.world_size  # DDP averages gradients; the local slice's gradient is complete
            (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
            parts.append(LossOutput(out.loss.detach(), out.simcse_loss, {k: v.detach() for k, v in out.stats.items()}))
        total = LossOutput(sum(p.loss for p in parts), sum(p.simcse_loss for p in parts),
                           {k: sum(p.stats[k] for p in parts) for k in parts[0].stats})
        local = slice(ctx.rank * z1.shape[0], (ctx.rank + 1) * z1.shape[0])
        return total, all1.grad[local], all2.grad[local]

    def _chunk_views(self, batch: dict[str, torch.Tensor], rows: slice) -> dict[str, torch.Tensor]:
        return self._views({k: v[rows] for k, v in batch.items()})

    def __call__(self, batch: dict[str, torch.Tensor], *, mark: Callable[[str], None] | None = None,
                 signals: dict[str, torch.Tensor] | None = None) -> StepResult:
        mark = mark or _no_mark
        device, k = self.ctx.device, self.mini_batch_size
        n = batch["input_ids"].shape[0]
        if n % k:
            raise ValueError(f"mini_batch_size {k} does not divide this rank's batch of {n} sentences")
        chunks = [slice(start, start + k) for start in range(0, n, k)]
        snapshots, first, second = [], [], []
        with torch.no_grad(), self._autocast():
            for rows in chunks:
                snapshots.append(rng_snapshot(device))
                pooled = self.model(self._chunk_views(batch, rows), length_buckets=self.length_buckets)
                # copies: a compiled model under CUDA graphs reuses its output memory on the next chunk's call
                first.append(pooled[:k].clone())
                second.append(pooled[k:].clone())
        after_embedding = rng_snapshot(device)
        mark("forward")
        out, grad1, grad2 = self._blocked_loss(torch.cat(first), torch.cat(second), signals)
        mark("loss")
        for i, rows in enumerate(chunks):
            rng_restore(snapshots[i], device)
            last = i == len(chunks) - 1
            sync = self.model.no_sync() if self.ctx.enabled and not last else contextlib.nullcontext()
            with sync:
                with self._autocast():
                    pooled = self.model(self._chunk_views(batch, rows), length_buckets=self.length_buckets)
                pooled.backward(torch.cat([grad1[rows], grad2[rows]]))
        rng_restore(after_embedding, device)
        mark("backward")
        return self._update(out, torch.cat([grad1, grad2]), mark)


def make_step(cfg: TrainConfig, ctx: DistContext, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
              objective: ContrastiveObjective | None = None, scaler: torch.amp.GradScaler | None = None, *,
              precision: str | None = None, length_buckets: int | None = None, levers=()) -> Step:
    """The step ``cfg`` describes: one pass or cached (``mini_batch_size``), compiled or eager (``compile``), its
    clipping norm, its forward buckets on ``ctx.device`` and its precision.

    ``model`` is the encoder, or its DistributedDataParallel wrapper. ``objective`` defaults to ``cfg``'s;
    ``precision`` to ``cfg.precision``, which must then be resolved already ("auto" is the trainer's to resolve);
    ``length_buckets`` to ``cfg.forward_buckets(device)``. fp16 needs ``scaler``. ``levers``: the run's levers (those
    with a loss term add it).
    """
    precision = precision or cfg.precision
    if precision not in ("fp32", *AUTOCAST_DTYPES):
        raise ValueError(f"precision must be fp32, bf16 or fp16 here, got {precision!r}")
    buckets, pad_to = length_buckets or cfg.forward_buckets(ctx.device.type), None
    if cfg.compile:
        model, buckets, pad_to = compile_encoder(model, ctx.device), 1, cfg.max_seq_length
    setting = dict(scaler=scaler, autocast_dtype=AUTOCAST_DTYPES.get(precision), length_buckets=buckets,
                   max_grad_norm=cfg.max_grad_norm, pad_to=pad_to,
                   levers=[lever for lever in levers if lever.has("loss_term")])
    objective = objective or cfg.objective()
    if cfg.mini_batch_size is not None:
        return CachedStep(ctx, model, optimizer, objective, mini_batch_size=cfg.mini_batch_size, **setting)
    return PlainStep(ctx, model, optimizer, objective, **setting)


def compile_encoder(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """``torch.compile`` for fixed shapes; on CUDA with CUDA graphs ("reduce-overhead"), which remove the kernel
    launch cost that bounds small batches. Parameters, state dict and ``no_sync`` stay the wrapped module's."""
    mode = "reduce-overhead" if device.type == "cuda" else None
    return torch.compile(model, mode=mode, dynamic=False)
