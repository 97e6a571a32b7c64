"""``README.md`` model cards for mixcse model directories, in the layout sentence-transformers gives its own cards.

``write_model_card`` is called by the trainer on ``output_dir/best``; ``update_model_card_with_eval`` rewrites the
card of a trained model with an STS / transfer table. The card's inputs are kept in the directory's
``mixcse.json`` (keys ``training``, ``summary``, ``eval``) so that the card can be rewritten later.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import yaml

from mixcse.evaluation.tasks import families
from mixcse.models.formats import LAYER_POOLERS
from mixcse.utils.files import atomic_write_text, read_json_or_none, to_jsonable
from mixcse.utils.tables import markdown_table, number

CARD_FILE = "README.md"
RECORD_FILE = "mixcse.json"
MODEL_PLACEHOLDER = "path/to/model"

POOLER_TEXT = {
    "cls_before_pooler": "the last layer's [CLS] vector",
    "cls": "the last layer's [CLS] vector through the MLP head (dense + tanh, in `2_Dense/`)",
    "avg": "the mean of the last layer's token vectors",
    "avg_first_last": "the mean over tokens of the average of the first and the last transformer layer",
    "avg_top2": "the mean over tokens of the average of the last two transformer layers",
}

MIXCSE_BIBTEX = """@inproceedings{zhang2022mixcse,
    title={Unsupervised Sentence Representation via Contrastive Learning with Mixing Negatives},
    author={Zhang, Yanzhao and Zhang, Richong and Mensah, Samuel and Liu, Xudong and Mao, Yongyi},
    booktitle={Proceedings of the AAAI Conference on Artificial Intelligence},
    volume={36},
    year={2022}
}"""
SIMCSE_BIBTEX = """@inproceedings{gao2021simcse,
    title={{SimCSE}: Simple Contrastive Learning of Sentence Embeddings},
    author={Gao, Tianyu and Yao, Xingcheng and Chen, Danqi},
    booktitle={Empirical Methods in Natural Language Processing (EMNLP)},
    year={2021}
}"""


# ------------------------------------------------------------------------------------------------ helpers


def _is_hub_id(name: str) -> bool:
    """'bert-base-uncased', 'org/model': a Hub id, not a path on this machine."""
    return bool(re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?", name)) and not os.path.exists(name) \
        and not name.endswith((".", "/"))


def _model_name(best_dir: Path) -> str:
    best_dir = best_dir.resolve()
    return best_dir.parent.name if best_dir.name == "best" and best_dir.parent.name else best_dir.name


def _describe_modules(best_dir: Path) -> tuple[str | None, int | None]:
    """('Transformer (BertModel) -> Pooling (cls) -> Dense (64 -> 64, tanh)', output dimension)."""
    modules = read_json_or_none(best_dir / "modules.json")
    config = read_json_or_none(best_dir / "config.json") or {}
    if not isinstance(modules, list):
        return None, config.get("hidden_size")
    arch = (config.get("architectures") or [config.get("model_type", "?")])[0]
    parts, dim = [], config.get("hidden_size")
    for module in modules:
        kind = module.get("type", "").rsplit(".", 1)[-1]
        sub = read_json_or_none(best_dir / module.get("path", "") / "config.json") or {}
        if kind == "Transformer":
            parts.append(f"Transformer ({arch})")
        elif kind == "Pooling":
            parts.append(f"Pooling ({sub.get('pooling_mode', '?')})")
        elif kind == "LayerAveragePooling":
            parts.append(f"LayerAveragePooling (layers {sub.get('layers')}, then mean)")
        elif kind == "Dense":
            act = str(sub.get("activation_function", "")).rsplit(".", 1)[-1].lower() or "identity"
            parts.append(f"Dense ({sub.get('in_features')} -> {sub.get('out_features')}, {act})")
            dim = sub.get("out_features", dim)
        else:
            parts.append(kind)
    return " -> ".join(parts), dim


# ------------------------------------------------------------------------------------------------ sections
def _front_matter(base_model: str | None, loss: str | None, eval_results: dict | None) -> str:
    tags = ["sentence-transformers", "sentence-similarity", "feature-extraction", "mixcse"]
    tags.append("simcse" if loss == "simcse" else "contrastive-learning")
    tags.append("unsupervised")
    meta: dict[str, Any] = {"library_name": "sentence-transformers", "pipeline_tag": "sentence-similarity",
                            "tags": tags}
    if base_model and _is_hub_id(base_model):
        meta["base_model"] = base_model
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n"


def _usage(pooler: str | None, model_id: str) -> list[str]:
    layer = LAYER_POOLERS.get(pooler or "")
    st_load = (f'model = SentenceTransformer("{model_id}", trust_remote_code=True)' if layer
               else f'model = SentenceTransformer("{model_id}")')
    lines = ["## Usage", "", "### Sentence Transformers", ""]
    if layer:
        lines += ["The pooling module of this model, `mixcse.integrations.st_modules.LayerAveragePooling`, comes from "
                  "the `mixcse` package (`pip install 'mixcse[st]'`); sentence-transformers imports a module from "
                  "outside its own package only with `trust_remote_code=True`.", ""]
    else:
        lines += ["```bash", "pip install -U sentence-transformers", "```", ""]
    lines += ["```python", "from sentence_transformers import SentenceTransformer", "", st_load,
              'sentences = ["A man is playing a guitar.", "Someone plays an instrument.", "The sky is blue."]',
              "embeddings = model.encode(sentences)", "similarities = model.similarity(embeddings, embeddings)",
              "print(embeddings.shape, similarities)", "```", "",
              "### mixcse", "", "```python", "from mixcse import SentenceEncoder", "",
              f'encoder = SentenceEncoder.load("{model_id}")',
              'sentences = ["A man is playing a guitar.", "Someone plays an instrument.", "The sky is blue."]',
              "embeddings = encoder.encode(sentences)",
              "similarities = encoder.similarity(embeddings, embeddings)",
              'hits = encoder.search("a person with a guitar", sentences, top_k=2)', "```", "",
              "```bash", f"mixcse encode {model_id} --input sentences.txt --output embeddings.npy",
              f'mixcse search {model_id} --corpus sentences.txt --query "a person with a guitar" --top-k 5', "```",
              "", "### Transformers", "", "```python", "import torch",
              "from transformers import AutoModel, AutoTokenizer"]
    if pooler == "cls":
        lines += ["from safetensors.torch import load_file"]
    lines += ["", f'tokenizer = AutoTokenizer.from_pretrained("{model_id}")',
              f'model = AutoModel.from_pretrained("{model_id}").eval()',
              'sentences = ["A man is playing a guitar.", "Someone plays an instrument.", "The sky is blue."]',
              'batch = tokenizer(sentences, padding=True, truncation=True, return_tensors="pt")',
              "with torch.no_grad():",
              "    out = model(**batch, output_hidden_states=True)" if layer else "    out = model(**batch)"]
    if pooler in ("cls_before_pooler", "cls", None):
        lines += ["embeddings = out.last_hidden_state[:, 0]"]
        if pooler == "cls":
            lines += ['head = load_file("' + model_id + '/2_Dense/model.safetensors")  # the MLP head',
                      'embeddings = torch.tanh(embeddings @ head["linear.weight"].T + head["linear.bias"])']
    else:
        lines += ['mask = batch["attention_mask"].unsqueeze(-1).to(out.last_hidden_state.dtype)']
        if layer:
            lines += [f"tokens = (out.hidden_states[{layer[0]}] + out.hidden_states[{layer[1]}]) / 2"]
        else:
            lines += ["tokens = out.last_hidden_state"]
        lines += ["embeddings = (tokens * mask).sum(1) / mask.sum(1)"]
    lines += ["similarities = torch.nn.functional.cosine_similarity(embeddings[:, None], embeddings[None], dim=-1)",
              "```", ""]
    return lines


def _eval_section(eval_results: dict) -> list[str]:
    """"Evaluation": each family's part of the card (evaluator.py), in the registry's order."""
    lines, settings = ["## Evaluation", ""], eval_results.get("settings") or {}
    for fam in families(eval_results):
        block = fam.card(eval_results[fam.section], settings)
        if block:
            lines += block + [""]
    if len(lines) == 2:
        lines += ["No STS, transfer, retrieval or pair results were recorded.", ""]
    return lines


# ------------------------------------------------------------------------------------------------ public API
def render_model_card(best_dir: Path, resolved: dict, summary: dict, eval_results: dict | None = None, *,
                      model_id: str = MODEL_PLACEHOLDER) -> str:
    """The text of the card; ``resolved`` is the trainer's resolved config (``{"config": ..., "objective": ...}``)."""
    best_dir = Path(best_dir)
    resolved, summary = resolved or {}, summary or {}
    cfg = resolved.get("config") or {}
    record = read_json_or_none(best_dir / RECORD_FILE) or {}
    pooler = summary.get("test_pooler") or (record.get("pooler") if isinstance(record, dict) else None)
    lines = [_front_matter(cfg.get("model"), cfg.get("loss"), eval_results), f"# {_model_name(best_dir)}", ""]
    lines += _details(best_dir, cfg, pooler)
    if cfg or resolved.get("objective"):
        lines += _recipe(resolved, summary) + _training_data(resolved, summary) + _levers(summary) + _selection(summary)
    if eval_results:
        lines += _eval_section(eval_results)
    lines += _usage(pooler, model_id)
    lines += ["## Citation", "", "```bibtex", MIXCSE_BIBTEX, "", SIMCSE_BIBTEX, "```", ""]
    return "\n".join(lines)


def _base_text(base: str | None) -> str | None:
    if base and _is_hub_id(base):
        return f"[{base}](https://huggingface.co/{base})"
    return f"`{Path(base).name}` (a local model)" if base else None


def _details(best_dir: Path, cfg: dict, pooler: str | None) -> list[str]:
    """The introduction, "Model Details" and the module architecture."""
    base_text, loss = _base_text(cfg.get("model")), cfg.get("loss")
    architecture, dim = _describe_modules(best_dir)
    recipe_name = {"simcse": "unsupervised SimCSE"}.get(loss or "", "MixCSE" if loss else None)
    intro = "This is a [sentence-transformers](https://www.SBERT.net) model"
    intro += f" trained from {base_text}" if base_text else ""
    intro += f" with {recipe_name} (contrastive learning with mixed hard negatives, Zhang et al., AAAI 2022)" \
        if recipe_name == "MixCSE" else (f" with {recipe_name}" if recipe_name else "")
    intro += ", using mixcse."
    intro += f" It maps sentences to a {dim}-dimensional dense vector space" if dim else \
        " It maps sentences to dense vectors"
    intro += " for semantic textual similarity, semantic search, clustering and classification."
    details = ["- **Model Type:** Sentence Transformer"]
    if base_text:
        details.append(f"- **Base model:** {base_text}")
    if pooler:
        details.append(f"- **Pooling:** `{pooler}`, {POOLER_TEXT.get(pooler, pooler)}")
        if pooler == "cls_before_pooler" and cfg.get("pooler") == "cls" and cfg.get("mlp_only_train", True):
            details[-1] += " (the MLP head is used in training only, as in unsupervised SimCSE)"
    if dim:
        details.append(f"- **Output Dimensionality:** {dim} dimensions")
    details.append("- **Similarity Function:** cosine similarity")
    if cfg.get("max_seq_length"):
        details.append(f"- **Training sequence length:** {cfg['max_seq_length']} tokens")
    lines = [intro, "", "## Model Details", ""] + details + [""]
    if architecture:
        lines += ["### Full Model Architecture", "", "```", architecture, "```", ""]
    return lines


def _recipe(resolved: dict, summary: dict) -> list[str]:
    """"Training" / "Recipe": the loss and the optimisation settings, and the keys a resume changed."""
    cfg, objective = resolved.get("config") or {}, resolved.get("objective") or {}
    loss = cfg.get("loss")
    lam = objective.get("lam", cfg.get("lam"))
    temperature = objective.get("temperature", cfg.get("temperature"))
    directions = objective.get("directions", cfg.get("directions"))
    steps, total = summary.get("steps"), summary.get("total_steps") or resolved.get("total_steps")
    train_pooler = f"`{cfg['pooler']}`" if cfg.get("pooler") else "--"
    if cfg.get("pooler") == "cls":
        train_pooler += " + MLP head" + (" (training only)" if cfg.get("mlp_only_train", True) else "")
    rows = [
        ["loss preset", f"`{loss}`" if loss else "--"],
        ["λ (mixing coefficient)", "-- (no mixed negatives)" if lam is None else f"{lam:g}"],
        ["τ (temperature)", f"{temperature:g}" if temperature is not None else "--"],
        ["directions", {1: "1 (anchors from view 1)", 2: "2 (both views as anchors)"}.get(directions, "--")],
    ]
    if lam is not None:
        rows.append(["mixed-negative gradient", {"stop": "stop-gradient", "through": "flows through"}.get(
            objective.get("mix_grad", cfg.get("mix_grad")), "--")])
        if objective.get("lam_bound"):
            rows.append(["λ bound", "per pair, mixed negative never closer than the positive"])
        if objective.get("formulation") == "released":
            rows.append(["formulation", "the released code's loss"])
    rows += [
        ["batch size", str(cfg.get("batch_size", "--"))],
        ["learning rate", f"{cfg['learning_rate']:g}" if cfg.get("learning_rate") else "--"],
        ["steps", f"{steps}" + (f" of {total}" if total and total != steps else "") if steps else "--"],
        ["pooler (training)", train_pooler],
        ["max sequence length", str(cfg.get("max_seq_length", "--"))],
        ["precision", str(resolved.get("precision", cfg.get("precision", "--")))],
        ["seed", str(cfg.get("seed", "--"))],
    ]
    if cfg.get("warmup_ratio"):
        rows.append(["warm-up", f"{cfg['warmup_ratio']:g} of the steps"])
    if cfg.get("weight_decay"):
        rows.append(["weight decay", f"{cfg['weight_decay']:g}"])
    views = ("every sentence is its own positive, the two views differing by dropout"
             if cfg.get("positives", "dropout") == "dropout" else
             f"each sentence's second view from `positives: {cfg.get('positives')}` (Adaptation Levers, below)")
    lines = ["## Training", "", "### Recipe", "", f"Unsupervised: {views}; the other sentences of the batch are the "
             "negatives"
             + (", plus one mixed hard negative per pair, normalize(λ·h'ᵢ + (1-λ)·h'ⱼ)." if lam is not None
                else "."), ""]
    lines += markdown_table(["setting", "value"], rows, centred=True) + [""]
    history = [entry for entry in resolved.get("history") or [] if isinstance(entry, dict)]
    if history:
        lines += ["Config keys changed when the run was resumed (the table shows the final values):", ""]
        for entry in history:
            changes = "; ".join(f"`{key}` {old} → {new}" for key, (old, new) in (entry.get("changed") or {}).items())
            lines.append(f"- from step {entry.get('step', '?')}: {changes}")
        lines.append("")
    return lines


def _training_data(resolved: dict, summary: dict) -> list[str]:
    cfg, steps = resolved.get("config") or {}, summary.get("steps")
    lines = ["### Training Data", ""]
    if cfg.get("train_file"):
        data = f"`{Path(cfg['train_file']).name}`, one sentence per line"
        if cfg.get("max_sentences"):
            data += f", first {cfg['max_sentences']:,} sentences"
        if cfg.get("dedupe"):
            data += ", de-duplicated"
        lines.append(f"- **File:** {data}")
    if steps and cfg.get("batch_size"):
        lines.append(f"- **Sentences seen:** {steps * cfg['batch_size']:,} ({steps} steps x {cfg['batch_size']})")
    if summary.get("train_seconds") is not None:
        lines.append(f"- **Training time:** {summary['train_seconds']:.0f} s on {resolved.get('device', '?')} "
                     f"({summary.get('sentences_per_second', 0):.0f} sentences/s)")
    return lines + [""]


def _levers(summary: dict) -> list[str]:
    """"Adaptation Levers": one line per lever the run used, from its report in the summary (training/levers/)."""
    levers = summary.get("levers")
    lines = [f"- **{name}:** {report.get('text') or ''}" for name, report in (levers or {}).items()
             if isinstance(report, dict)]
    return ["### Adaptation Levers", "", *lines, ""] if lines else []


def _selection(summary: dict) -> list[str]:
    """"Checkpoint Selection": the start and the selected checkpoint, and the held-out pairs on both."""
    lines = ["### Checkpoint Selection", ""]
    if summary.get("best_dev") is not None:
        metric = summary.get("select_metric") or "stsb_dev"
        what = summary.get("selection") or "Spearman correlation x100 of cosine similarities on the STS-B " \
                                            "development set"
        lines += [f"Selected on {what}; the starting model was a candidate.", ""]
        alpha = summary.get("best_alpha")
        selected = f"selected (step {summary.get('best_step', '?')}" + (
            f", blend {alpha:g} with the start model)" if alpha not in (None, 1.0) else ")")
        lines += markdown_table(["checkpoint", f"`{metric}`"],
                                [["start (before training)", number(summary.get("raw_dev"))],
                                 [selected, number(summary.get("best_dev"))]], centred=True)
        if summary.get("start_won"):
            lines += ["", "No training step beat the starting model on this metric: these are its weights."]
        lines.append("")
        lines += _candidates(summary, metric)
    else:
        lines += ["No selection data was used during training: this is the final checkpoint"
                  + (f" (step {summary['best_step']})." if summary.get("best_step") else "."), ""]
    held_out = summary.get("test_pairs")
    if held_out:
        f1 = any(r.get("f1_best") is not None for r in held_out.values())
        lines += ["Held-out labelled pairs, never used for selection (x100" + (
            "; F1 at the threshold that maximises F1 on the selection pairs" if f1 else "") + "):", ""]
        lines += markdown_table(["pairs", "metric", "start", "selected", *(["F1 start", "F1 selected"] if f1 else [])],
                                [[name, r.get("metric", "?"), number(r.get("start")), number(r.get("best")),
                                  *([number(r.get("f1_start")), number(r.get("f1_best"))] if f1 else [])]
                                 for name, r in held_out.items()], centred=True)
        lines.append("")
    return lines


def _candidates(summary: dict, metric: str) -> list[str]:
    """Every scored candidate (checkpoints and blends with the start model) with its guard scores -- the frontier --
    and the sentence saying why the selected model was chosen."""
    candidates, guards = summary.get("candidates"), summary.get("guards") or []
    if not candidates:
        return []
    lines = [f"Selection: {summary['decision']}.", ""] if summary.get("decision") else []
    for guard in guards:
        refused = len(guard.get("refused") or [])
        lines += [f"Forgetting guard: `{guard.get('metric')}` ({guard.get('description', guard.get('data'))}); a "
                  f"candidate that scores more than {guard.get('tolerance')} points below the start model's "
                  f"{number(guard.get('start'))} is refused ({refused} refused; the guard is asked of a checkpoint "
                  f"only when it would be kept, and of every searched blend). The selected model scores "
                  f"{number(guard.get('best'))}.", ""]
    header = ["step", "blend weight", f"`{metric}`"] + [f"`{g.get('metric')}`" for g in guards] + \
        (["accepted"] if guards else [])
    rows = [[str(c.get("step")), f"{c.get('alpha', 1.0):g}", number(c.get("score"))]
            + [number(s) for s in (c.get("guards") or [None] * len(guards))]
            + ([{True: "yes", False: "refused"}.get(c.get("accepted"), "–")] if guards else [])
            for c in candidates]
    lines += ["Candidates (a blend weight a is (1 - a) x the start model + a x the checkpoint):", ""] + \
        markdown_table(header, rows, centred=True) + [""]
    if summary.get("frontier_plot"):
        lines += ["![selection score against each guard, every candidate](frontier.png)", ""]
    return lines


def write_model_card(best_dir: Path, resolved: dict, summary: dict, eval_results: dict | None = None, *,
                     model_id: str = MODEL_PLACEHOLDER) -> Path:
    """Write ``best_dir/README.md`` and keep its inputs in ``best_dir/mixcse.json``; returns the card's path."""
    best_dir = Path(best_dir)
    best_dir.mkdir(parents=True, exist_ok=True)
    record = read_json_or_none(best_dir / RECORD_FILE)
    record = record if isinstance(record, dict) else {}
    record.update(training=to_jsonable(resolved or {}), summary=to_jsonable(summary or {}))
    if eval_results is not None:
        record["eval"] = to_jsonable(eval_results)
    else:
        record.pop("eval", None)
    atomic_write_text(best_dir / RECORD_FILE, json.dumps(record, indent=2) + "\n")
    text = render_model_card(best_dir, resolved, summary, eval_results, model_id=model_id)
    atomic_write_text(best_dir / CARD_FILE, text)
    return best_dir / CARD_FILE


def update_model_card_with_eval(best_dir: Path, eval_results: dict, *, model_id: str = MODEL_PLACEHOLDER) -> Path:
    """Rewrite the card of a mixcse model directory with an STS / transfer table.

    The training recipe comes from the directory's ``mixcse.json`` (written with the first card); a directory
    without one (a model saved by ``Encoder.save`` outside training) gets a card with what the directory shows.
    """
    best_dir = Path(best_dir)
    if not best_dir.is_dir():
        from mixcse.errors import MixCSEError

        raise MixCSEError(f"not a model directory: {best_dir}")
    record = read_json_or_none(best_dir / RECORD_FILE)
    record = record if isinstance(record, dict) else {}
    return write_model_card(best_dir, record.get("training") or {}, record.get("summary") or {}, eval_results,
                            model_id=model_id)
