"""sentence-transformers modules that mixcse model directories refer to in ``modules.json``.

``LayerAveragePooling`` is the Pooling step of the layer-averaging poolers (``avg_first_last``, ``avg_top2``), which
have no built-in sentence-transformers equivalent. sentence-transformers 6 imports a module class from outside its
own namespace only with ``trust_remote_code=True`` (the class is imported from the installed ``mixcse`` package, no
code is read from the model directory), so such a model loads with::

    SentenceTransformer(path, trust_remote_code=True)

Models with the other poolers (cls_before_pooler, cls, avg) use only built-in modules and need no flag.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from mixcse.models.pooling import two_layer_mean

try:
    from sentence_transformers.base.modules.module import Module
    from sentence_transformers.base.modules.transformer import Transformer
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "mixcse.integrations.st_modules needs sentence-transformers>=6: pip install 'mixcse[st]'"
    ) from exc


class LayerAveragePooling(Module):
    """Average two hidden layers token by token, then take the masked mean over the tokens.

    ``layers`` index the Transformer's hidden states as Hugging Face returns them: 0 is the embedding output, 1 the
    first transformer layer, -1 the last. ``[1, -1]`` is mixcse's ``avg_first_last`` and ``[-2, -1]`` its
    ``avg_top2`` (SimCSE's poolers of the same names).

    The hidden states come from the preceding ``Transformer`` module as the ``all_layer_embeddings`` feature, which
    it fills when its model config has ``output_hidden_states=True``. mixcse writes that to ``config_kwargs`` in
    ``sentence_bert_config.json``, and this module also switches it on when the model is assembled
    (``on_model_ready``), so ``SentenceTransformer(modules=[Transformer(...), LayerAveragePooling(...)])`` works too.

    Args:
        embedding_dimension: Width of the token embeddings (the backbone's hidden size).
        layers: The two hidden-state indices to average. Defaults to ``[1, -1]``.

    Example:
        ::

            from sentence_transformers import SentenceTransformer
            from sentence_transformers.base.modules import Transformer
            from mixcse.integrations.st_modules import LayerAveragePooling

            transformer = Transformer("bert-base-uncased")
            pooling = LayerAveragePooling(transformer.get_embedding_dimension(), layers=[1, -1])
            model = SentenceTransformer(modules=[transformer, pooling])
    """

    config_keys: list[str] = ["embedding_dimension", "layers"]

    def __init__(self, embedding_dimension: int, layers: list[int] | tuple[int, int] = (1, -1)) -> None:
        super().__init__()
        layers = [int(x) for x in layers]
        if len(layers) != 2:
            raise ValueError(f"LayerAveragePooling averages exactly two layers, got layers={layers}")
        self.embedding_dimension = int(embedding_dimension)
        self.layers = layers

    def on_model_ready(self, model) -> None:
        for module in model._modules.values():
            if isinstance(module, Transformer):
                module.auto_model.config.output_hidden_states = True

    def forward(self, features: dict[str, Tensor | Any], **kwargs) -> dict[str, Tensor | Any]:
        hidden = features.get("all_layer_embeddings")
        if hidden is None:
            raise ValueError(
                "LayerAveragePooling needs all hidden states (the 'all_layer_embeddings' feature): load the "
                "Transformer module with config_kwargs={'output_hidden_states': True}"
            )
        first, second = hidden[self.layers[0]], hidden[self.layers[1]]
        out_dtype = first.dtype
        acc = torch.float32 if out_dtype in (torch.float16, torch.bfloat16) else out_dtype
        first, second = first.to(acc), second.to(acc)
        if "cu_seq_lens_q" in features:  # flash-attention unpadding: (1, total_tokens, d), one segment per row
            tokens = ((first + second) / 2.0).squeeze(0)
            bounds = features["cu_seq_lens_q"]
            lengths = bounds[1:] - bounds[:-1]
            segments = torch.repeat_interleave(torch.arange(lengths.numel(), device=tokens.device), lengths)
            summed = torch.zeros(lengths.numel(), tokens.shape[-1], device=tokens.device, dtype=acc)
            summed = summed.index_add(0, segments, tokens)
            pooled = summed / lengths.clamp_min(1).unsqueeze(1).to(acc)
        else:
            mask = features.get("attention_mask")
            if mask is None or mask.shape[-1] != first.shape[1]:
                mask = torch.ones(first.shape[:-1], device=first.device, dtype=torch.int64)
            pooled = two_layer_mean(first, second, mask)
        features["sentence_embedding"] = pooled.to(out_dtype)
        return features

    def get_embedding_dimension(self) -> int:
        return self.embedding_dimension

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        self.save_config(output_path)
