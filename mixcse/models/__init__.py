"""The model and its inference: what a sentence encoder is, on disk and at run time.

    encoder.py           ``Encoder`` = any Hugging Face backbone + a pooler (+ SimCSE's MLP head while training)
    pooling.py           every pooler, once, for torch tensors and numpy arrays alike
    formats.py, hub.py   the on-disk format (a HF folder that is also a sentence-transformers folder); model names
                         to folders (offline copies when the hub is unreachable)
    inference.py         ``EncoderBase``, the one encode loop both encoders inherit (with ``search``,
                         ``similarity``), and ``open_encoder``, the one backend dispatch
    sentence_encoder.py  ``SentenceEncoder``: torch inference (fp32 or bf16 autocast)
    onnx_backend.py      ``OnnxSentenceEncoder``: onnxruntime inference, no torch import
    export.py            ``mixcse export``: the model folder + onnx/model.onnx (fused; int8 too)
    merge.py             ``mixcse merge``: weighted averages of model folders of one architecture
    search.py            exact cosine top-k: numpy, or faiss when installed
    dropout.py           dropout masks drawn with numpy on CPU (a training-speed piece of the model)

May import ``mixcse.utils``, ``mixcse.data``, ``mixcse.errors`` and ``mixcse.losses``; never evaluation or training.
"""
