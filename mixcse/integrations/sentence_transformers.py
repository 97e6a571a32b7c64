"""MixCSE (and SimCSE) as a sentence-transformers loss, computed by ``mixcse.losses.contrastive_loss``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torch import Tensor, nn

try:
    from sentence_transformers.base.losses.merged_forward import embed_columns
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "mixcse.integrations.sentence_transformers needs sentence-transformers>=6: pip install 'mixcse[st]'"
    ) from exc

from mixcse.losses import ContrastiveObjective, contrastive_loss, objective_from_preset
from mixcse.evaluation.modelcard import MIXCSE_BIBTEX

MIXCSE_CITATION = f"\n{MIXCSE_BIBTEX}\n"


class MixCSELoss(nn.Module):
    def __init__(
        self,
        model: nn.Module,
        lam: float | None = 0.2,
        temperature: float = 0.05,
        directions: int = 2,
        mix_grad: str = "stop",
        *,
        lam_bound: bool = False,
        formulation: str = "paper",
    ) -> None:
        """
        MixCSE loss (Zhang et al., AAAI 2022): the in-batch contrastive loss of SimCSE, with one extra hard negative
        per in-batch pair, ``normalize(lam * h'_i + (1 - lam) * h'_j)``, a mixture of the positive and a random
        negative that sits close to the anchor. The mixture is under stop-gradient by default.

        For the unsupervised recipe, the anchor and positive columns hold the *same* sentence: the two dropout
        masks of the two forward passes make the two views. Both columns are embedded in one forward pass of
        ``2 * batch_size`` rows where sentence-transformers can merge them, as in the original implementation.

        The loss itself is ``mixcse.losses.contrastive_loss``, the function mixcse's own trainer uses, so a model
        trained through ``SentenceTransformerTrainer`` optimises exactly the same objective.

        The loss is returned as a dict of two parts, which ``SentenceTransformerTrainer`` sums into the training
        loss and logs separately:

        - ``simcse``: the plain InfoNCE (SimCSE) loss on the same batch, a constant without gradient, for logging;
        - ``mixing``: what the mixed negatives add, ``loss - simcse``. It carries the whole gradient, so the sum of
          the two parts equals the MixCSE loss in value and in gradient.

        The mean positive, in-batch negative and mixed-negative cosines of the last batch are kept, detached, in
        ``last_stats`` (``pos_cos``, ``neg_cos``, ``mix_cos``).

        Args:
            model: SentenceTransformer model. Its dropout must be active in training (the default of BERT-like
                models), since dropout is the only augmentation of the unsupervised recipe.
            lam: Mixing coefficient lambda in [0, 1): the weight of the positive in a mixed negative. The paper uses
                0.2. ``None`` turns the mixing off (plain SimCSE).
            temperature: Softmax temperature tau of the cosine similarities (``scale = 1 / temperature``). 0.05 as
                in SimCSE and MixCSE.
            directions: 2 (default) averages the loss anchored on each of the two views; 1 anchors on the first
                column only.
            mix_grad: ``"stop"`` (default, as in the paper) treats the mixed negatives as constants; ``"through"``
                lets gradients flow through them (the paper's "w/o stop-gradient" ablation).
            lam_bound: Clip lambda per pair so that a mixed negative is never closer to the anchor than the
                positive. Keyword only.
            formulation: ``"paper"`` (default) or ``"released"``, the loss of the authors' released code (see
                mixcse's docs/released-code.md). Keyword only.

        References:
            - Unsupervised Sentence Representation via Contrastive Learning with Mixing Negatives (AAAI 2022):
              https://ojs.aaai.org/index.php/AAAI/article/view/21428
            - SimCSE: Simple Contrastive Learning of Sentence Embeddings: https://arxiv.org/abs/2104.08821

        Requirements:
            1. (anchor, positive) pairs; for the unsupervised recipe, the same sentence in both columns
            2. Batches of at least 2 pairs: the other pairs of the batch are the negatives

        Inputs:
            +------------------------------------------------+--------+
            | Texts                                          | Labels |
            +================================================+========+
            | (anchor, positive) pairs                       | none   |
            +------------------------------------------------+--------+
            | (sentence, same sentence) pairs (unsupervised) | none   |
            +------------------------------------------------+--------+

        Recommendations:
            - Use ``BatchSamplers.NO_DUPLICATES`` (:class:`docs <sentence_transformers.base.sampler.BatchSamplers>`)
              so that no in-batch negative is a copy of the anchor.
            - Use batches of 64 and a learning rate of 3e-5 for BERT-base, as in the paper.
            - On several devices, each device's batch is its own pool of negatives (embeddings are not gathered
              across devices); mixcse's own trainer (``mixcse train``) gathers them.

        Relations:
            - With ``lam=None`` (or ``MixCSELoss.from_preset(model, "simcse")``) and ``directions=1`` this is
              :class:`~sentence_transformers.sentence_transformer.losses.MultipleNegativesRankingLoss` with
              ``scale = 1 / temperature``: the SimCSE loss.
            - With ``directions=2`` and no mixing it is the symmetric InfoNCE of
              ``MultipleNegativesRankingLoss(directions=("query_to_doc", "doc_to_query"),
              partition_mode="per_direction")``.
            - ``MixCSELoss.from_preset(model, name)`` builds the loss of one of ``mixcse.losses.PRESETS``:
              ``simcse``, ``mixcse``, ``mixcse-single``, ``mixcse-wo-sg``, ``mixcse-bound``, ``mixcse-released``.

        Example:
            ::

                from datasets import Dataset
                from sentence_transformers import (
                    SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments,
                )
                from sentence_transformers.base.modules import Transformer
                from sentence_transformers.sentence_transformer.modules import Pooling
                from mixcse.integrations.sentence_transformers import MixCSELoss

                transformer = Transformer("bert-base-uncased", max_seq_length=32)
                pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="cls")
                model = SentenceTransformer(modules=[transformer, pooling])

                sentences = ["It's nice weather outside today.", "He drove to work.", "The cat sat on the mat."]
                train_dataset = Dataset.from_dict({"anchor": sentences, "positive": sentences})
                loss = MixCSELoss(model, lam=0.2, temperature=0.05)

                args = SentenceTransformerTrainingArguments(
                    output_dir="runs/st-mixcse", per_device_train_batch_size=64, learning_rate=3e-5,
                    num_train_epochs=1,
                )
                trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=train_dataset, loss=loss)
                trainer.train()
        """
        super().__init__()
        self.model = model
        try:
            self.objective = ContrastiveObjective(
                lam=lam, temperature=temperature, directions=directions, mix_grad=mix_grad,
                lam_bound=lam_bound, formulation=formulation,
            )
        except TypeError as exc:  # e.g. a string where a number belongs
            raise ValueError(str(exc)) from None
        self.last_stats: dict[str, Tensor] = {}

    @classmethod
    def from_preset(cls, model: nn.Module, name: str, **overrides: Any) -> MixCSELoss:
        """The loss of the preset ``name`` of ``mixcse.losses.PRESETS``, with some fields replaced.

        ``MixCSELoss.from_preset(model, "mixcse-single")``, ``MixCSELoss.from_preset(model, "mixcse", lam=0.1)``.
        """
        objective = objective_from_preset(name, **overrides)
        return cls.from_objective(model, objective)

    @classmethod
    def from_objective(cls, model: nn.Module, objective: ContrastiveObjective) -> MixCSELoss:
        return cls(model, lam=objective.lam, temperature=objective.temperature, directions=objective.directions,
                   mix_grad=objective.mix_grad, lam_bound=objective.lam_bound, formulation=objective.formulation)

    @property
    def lam(self) -> float | None:
        return self.objective.lam

    @property
    def temperature(self) -> float:
        return self.objective.temperature

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None) -> dict[str, Tensor]:
        features = list(sentence_features)
        if len(features) != 2:
            raise ValueError(
                f"MixCSELoss takes (anchor, positive) pairs, i.e. 2 text columns; got {len(features)}. For the "
                "unsupervised recipe put the same sentence in both columns."
            )
        # Both columns in one forward pass when they tokenise alike (always, for identical sentences).
        z1, z2 = embed_columns(self.model, features, separate_first=False)
        return self.compute_loss_from_embeddings(z1, z2)

    def compute_loss_from_embeddings(self, z1: Tensor, z2: Tensor) -> dict[str, Tensor]:
        """The loss parts from two (N, d) views; ``sum(parts.values())`` is ``contrastive_loss(z1, z2).loss``."""
        out = contrastive_loss(z1, z2, self.objective)
        self.last_stats = dict(out.stats)
        simcse = out.simcse_loss  # detached: its share of the gradient is carried by ``mixing``
        return {"simcse": simcse, "mixing": out.loss - simcse}

    def get_config_dict(self) -> dict[str, Any]:
        return {"lam": self.objective.lam, "temperature": self.objective.temperature,
                "directions": self.objective.directions, "mix_grad": self.objective.mix_grad,
                "lam_bound": self.objective.lam_bound, "formulation": self.objective.formulation}

    @property
    def citation(self) -> str:
        return MIXCSE_CITATION
