"""The encoder: any Hugging Face ``AutoModel`` backbone + a pooler (+ SimCSE's MLP head at train time)."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from mixcse.models import formats
from mixcse.errors import MixCSEError
from mixcse.models.formats import LAYER_POOLERS
from mixcse.models.hub import resolve_model
from mixcse.models.pooling import pool

# cls: [CLS] + MLP head (SimCSE/MixCSE training pooler); cls_before_pooler: raw [CLS];
# avg: mean of the last layer; avg_first_last: mean of (first transformer layer + last) / 2 - layer 1, not the
# embedding output; avg_top2: mean of the last two layers.
POOLERS = ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2")


class MLPHead(nn.Module):
    """SimCSE's projection: dense + tanh on the [CLS] vector, randomly initialised, same width as the encoder."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(x))


class Encoder(nn.Module):
    """Backbone + pooling. ``forward(batch, use_head)`` returns one vector per sentence.

    With ``pooler="cls"`` and ``mlp_only_train=True`` (SimCSE's unsupervised setting) the MLP head is applied while
    training and dropped at test time, so the test-time pooler is ``cls_before_pooler``.
    """

    def __init__(self, backbone: nn.Module, pooler: str, mlp_only_train: bool = True, head: MLPHead | None = None):
        super().__init__()
        if pooler not in POOLERS:
            raise MixCSEError(f"unknown pooler {pooler!r}; choose one of {', '.join(POOLERS)}")
        self.backbone = backbone
        self.pooler = pooler
        self.mlp_only_train = mlp_only_train
        self.head = head if head is not None else (MLPHead(backbone.config.hidden_size) if pooler == "cls" else None)

    @property
    def test_pooler(self) -> str:
        return "cls_before_pooler" if self.pooler == "cls" and self.mlp_only_train else self.pooler

    @property
    def hidden_size(self) -> int:
        return self.backbone.config.hidden_size

    def forward(self, batch: dict[str, torch.Tensor], use_head: bool | None = None,
                length_buckets: int = 1) -> torch.Tensor:
        """One vector per row of ``batch``. ``use_head=None`` follows the mode: the head is used in training, and
        at test time unless mlp_only_train.

        ``length_buckets > 1`` computes the same function as ``length_buckets`` passes over length-sorted slices of
        the batch, each trimmed to its own longest sequence, rows returned in their original order. Attention never
        reaches padding, so only the wasted work changes: on Wikipedia sentences at max length 32, 22% of a random
        batch's positions are padding, 8% with 4 buckets. Dropout masks are drawn per slice, so the random stream
        (not its distribution) differs from one pass.
        """
        if use_head is None:
            use_head = self.pooler == "cls" and (self.training or not self.mlp_only_train)
        mask = batch["attention_mask"]
        if length_buckets <= 1 or mask.shape[0] < 2 * length_buckets:
            return self._pool(batch, use_head)
        # a row's length is its last attended position + 1 (a mask with gaps, as cutoff leaves, keeps its tail)
        lengths = mask.shape[1] - torch.argmax(mask.flip(1), dim=1)
        order = torch.argsort(lengths, stable=True)
        pooled = []
        for part in torch.tensor_split(order, length_buckets):
            width = int(lengths[part].max())  # one host sync per slice: the width sets the tensor shape
            pooled.append(self._pool({k: v[part, :width] for k, v in batch.items()}, use_head))
        return torch.cat(pooled).index_select(0, torch.argsort(order))

    def _pool(self, batch: dict[str, torch.Tensor], use_head: bool) -> torch.Tensor:
        layers = self.pooler in LAYER_POOLERS
        outputs = self.backbone(**batch, output_hidden_states=layers, return_dict=True)
        pooled = pool(self.pooler, outputs.hidden_states if layers else outputs.last_hidden_state,
                      batch["attention_mask"])
        if use_head and self.head is not None:
            pooled = self.head(pooled)
        return pooled

    def save(self, directory: str | os.PathLike, tokenizer, *, max_seq_length: int | None = None) -> None:
        """Write a directory loadable by ``AutoModel``, ``SentenceTransformer`` and ``load_encoder``."""
        head = self.head if self.test_pooler == "cls" else None
        formats.write_model_dir(
            Path(directory), self.backbone, tokenizer, pooler=self.test_pooler, head=head,
            max_seq_length=max_seq_length,
        )


def load_backbone(name_or_path: str, *, trust_remote_code: bool = False):
    """AutoModel + AutoTokenizer from a hub name or a local directory, weights from safetensors only."""
    import transformers
    from safetensors import SafetensorError
    from transformers import AutoModel, AutoTokenizer

    transformers.logging.set_verbosity_error()  # unused MLM-head weights are expected, not news
    transformers.logging.disable_progress_bar()
    looks_local = os.path.sep in name_or_path or name_or_path.startswith(".") or os.path.exists(name_or_path)
    if os.path.isfile(name_or_path):
        raise MixCSEError(f"model path is a file, not a model folder: {name_or_path}")
    if looks_local and not os.path.isdir(name_or_path):
        raise MixCSEError(f"model path does not exist: {name_or_path}")
    if os.path.isdir(name_or_path):
        _check_model_dir(name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
        # float32 master weights whatever the checkpoint's dtype (transformers 5 loads a half-precision checkpoint
        # in half precision, which AdamW cannot train); bf16/fp16 compute is autocast's job (`precision`).
        backbone = AutoModel.from_pretrained(
            name_or_path, trust_remote_code=trust_remote_code, use_safetensors=True, dtype=torch.float32
        )
    except (OSError, ValueError, SafetensorError) as exc:  # SafetensorError: a damaged file in the hub cache
        message = " ".join(str(exc).split()) or type(exc).__name__  # transformers' messages span lines
        if len(message) > 300:
            message = message[:297] + "..."
        raise MixCSEError(f"cannot load model {name_or_path!r}: {message}") from None
    return backbone, tokenizer


# what a local model folder must hold for AutoTokenizer / AutoModel (weights: safetensors only)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "spiece.model", "spm.model",
                   "sentencepiece.bpe.model", "sentencepiece.model", "tokenizer.model")


def _check_model_dir(path: str) -> None:
    """One complete error line naming what a local folder lacks, before transformers reports it piecemeal."""
    folder = Path(path)
    missing = []
    if not (folder / "config.json").is_file():
        missing.append("no config.json")
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        missing.append("no tokenizer files (tokenizer.json, tokenizer_config.json or vocab.txt)")
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        missing.append("no *.safetensors weights")
    if missing:
        raise MixCSEError(f"{path} is not a model folder: {'; '.join(missing)}")
    for file in weights:
        formats.check_safetensors(file)


def load_encoder(
    name_or_path: str,
    *,
    pooler: str | None = None,
    mlp_only_train: bool = True,
    trust_remote_code: bool = False,
) -> tuple[Encoder, object, dict]:
    """An ``Encoder`` and its tokenizer from a mixcse/sentence-transformers directory or any HF model.

    A sentence-transformers directory supplies its own pooler (and dense head); ``pooler`` overrides it. A plain HF
    model defaults to ``cls_before_pooler``. Returns (encoder, tokenizer, info) where info holds what the directory
    said (``pooler``, ``max_seq_length``).
    """
    name_or_path = resolve_model(name_or_path)
    info = formats.read_model_dir(name_or_path) if os.path.isdir(name_or_path) else formats.ModelDirInfo(name_or_path)
    backbone, tokenizer = load_backbone(info.backbone_path, trust_remote_code=trust_remote_code)
    chosen = pooler or info.pooler or "cls_before_pooler"
    head = None
    if chosen == "cls":
        head = MLPHead(backbone.config.hidden_size)
        if info.head_state is not None:
            head.load_state_dict(info.head_state)
            mlp_only_train = False if pooler is None else mlp_only_train  # a stored head is part of the test pooler
    encoder = Encoder(backbone, chosen, mlp_only_train=mlp_only_train, head=head)
    return encoder, tokenizer, {"pooler": chosen, "max_seq_length": info.max_seq_length}
