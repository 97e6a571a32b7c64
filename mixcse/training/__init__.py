"""Training: the recipe's config, the run and its step.

    config.py     ``TrainConfig`` (the recipe's keys, typo hints) and ``load_recipe``
    trainer.py    ``train(cfg)``: a ``Run`` with setup / step / evaluate / save
    step.py       one optimiser step (plain, cached big batch, compiled), over ``mixcse.losses``
    levers/       the adaptation levers, one module each (positives, augment, false negatives, distillation)
    selection.py  the selection room: candidates, blends, guards, the decision
    rundir.py     the output folder: checkpoints, resume, metrics log, folder lock
    tracking.py   TensorBoard / Weights & Biases
    distributed.py torch.distributed (DDP) helpers
    dropout.py    the CPU dropout that draws its masks with numpy

May import every stage below it (``utils``, ``data``, the model, ``evaluation``, ``modelcard``); only ``cli`` imports
it.
"""
