"""Adaptation levers: each one unit, found through one registry.

A lever changes what a training step sees or minimises, from the start model and the training text. It is a
``Lever`` subclass, registered with ``register_lever``; the trainer, the config, summary.json, the model card and the
benchmarks loop over the registry (``LEVERS``), so a new lever is one module here and nothing else::

    register_lever(cls) / unregister_lever(name)           the registry (LEVERS) in and out
    name                   its key in summary.json "levers"
    keys                   {recipe key: (type, default)}: top-level recipe keys (TrainConfig reads them)
    renamed                {old key: key}: old recipes and config.yaml files still load
    active(cfg)            whether this run uses it
    check(cfg)             its keys' checks (ConfigError); run for every run, before anything is written
    Lever(cfg) then .prepare(start)    what it needs of the start model and the corpus (``StartModel``)
    .pairs()               (anchor, positive) per training sentence: the second view of each (or None)
    .signals(indices)      tensors for the loss of one global batch (``exclude`` is the contrastive loss's mask)
    .loss_term(z1, z2, signals, objective, rows) -> (term, stats) or None: added to the contrastive loss
    .view(batch, indices, step) -> batch: the token batch of one step, changed (text augmentation)
    .report()              plain data for summary.json "levers" (its "text" is the card's and the report's line)

Blends with the start model and the forgetting guards are selection (training/selection.py), not levers. The
built-in levers: positives.py (mined, title, neighbours), augment.py (text views), false_negatives.py (masking),
distillation.py (the start model's similarities).
"""
# the built-in levers register themselves on import, in the order their hooks run
from mixcse.training.levers import positives, augment, false_negatives, distillation  # noqa: F401,I001
from mixcse.training.levers.base import (
    LEVERS,
    Lever,
    StartModel,
    active_levers,
    lever_keys,
    positives_values,
    register_lever,
    renamed_keys,
    reserve_keys,
    unregister_lever,
)

__all__ = ["LEVERS", "Lever", "StartModel", "active_levers", "lever_keys", "positives_values", "register_lever",
           "renamed_keys", "reserve_keys", "unregister_lever"]
