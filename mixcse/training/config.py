"""Training configuration: one flat set of recipe keys, loaded from a YAML recipe plus ``key=value`` overrides.

The keys are the fields below and the keys of every registered lever (mixcse/training/levers/): a lever owns its
keys, their defaults and their checks, and they stay top-level recipe keys (``cfg.positives`` reads one)."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import types
import typing
from dataclasses import dataclass
from pathlib import Path

import yaml

from mixcse.data.documents import SEGMENTS
from mixcse.errors import ConfigError
from mixcse.evaluation.selection import select_on_values
from mixcse.losses import PRESETS, ContrastiveObjective, objective_from_preset
from mixcse.models.encoder import POOLERS
from mixcse.training.levers import LEVERS, lever_keys, renamed_keys, reserve_keys
from mixcse.training.tracking import parse_report_to

TRAIN_PRECISIONS = ("fp32", "bf16", "fp16", "auto")
CORPORA = ("memory", "disk")


@dataclass
class _Fields:
    # what to train
    model: str = ""
    train_file: str = ""
    output_dir: str = ""
    # objective: a preset name; lam/directions/mix_grad/lam_bound override the preset when set
    loss: str = "mixcse"
    lam: float | None = None
    temperature: float = 0.05
    directions: int | None = None
    mix_grad: str | None = None
    lam_bound: bool | None = None
    # encoder
    pooler: str = "cls"
    mlp_only_train: bool = True
    max_seq_length: int = 32
    trust_remote_code: bool = False
    # data
    max_sentences: int | None = None  # use only the first N segments of train_file
    # memory: read and tokenise the text at start (what a run uses); disk: tokenise the whole file once into
    # shards cached on disk, read per batch (mixcse/data/disk.py), so that RAM does not grow with the corpus
    corpus: str = "memory"
    corpus_cache_dir: str | None = None  # disk: where the shards go (None: $MIXCSE_CACHE/corpus or ~/.cache/mixcse)
    # documents (.jsonl/.csv/.tsv/.parquet) vs plain lines: see docs/training-data.md; None = the format's default
    text_column: str | None = None  # default: "text", with "title" in front when there is one (BEIR)
    segment: str | None = None  # line | sentence | passage; None: line for plain text, sentence for documents
    min_words: int | None = None  # drop shorter segments; None: 4 for documents, no minimum for plain text
    dedupe: bool | None = None  # None: on for documents, off for plain text
    # optimisation (SimCSE's unsupervised BERT-base defaults)
    batch_size: int = 64  # sentences per global batch: the in-batch negatives (split over DDP processes)
    # memory only: encode each process's batch in chunks of this many sentences and cache the embedding gradients
    # (mixcse/training/step.py CachedStep); the same gradients as one pass. None = one pass over the whole batch
    mini_batch_size: int | None = None
    learning_rate: float = 3e-5
    weight_decay: float = 0.0
    warmup_ratio: float = 0.0
    max_grad_norm: float | None = 1.0
    epochs: int = 1
    max_steps: int | None = None  # overrides epochs
    seed: int = 42
    precision: str = "fp32"
    num_threads: int | None = None
    # forward each batch as this many length-sorted slices, each padded to its own longest sentence; None = 4 on CPU
    # (less padding computed: 1.1x faster steps) and 1 on GPUs (where each slice's host sync and kernel launches
    # cost more than the padding: 3x slower steps measured on an H200)
    length_buckets: int | None = None
    compile: bool = False  # torch.compile the encoder; batches padded to max_seq_length (static shapes)
    fast_cpu_dropout: bool = True  # on CPU, draw dropout masks with numpy (mixcse/models/dropout.py): ~3x cheaper
    # the levers' keys (positives, mine_threshold, augment..., false_negative_threshold, distill_weight) are
    # declared by the levers themselves: mixcse/training/levers/
    # checkpoint selection (mixcse/evaluation/selection.py): the start model (step 0) is always a candidate
    select_on: str = "stsb_dev"  # stsb_dev | retrieval | pairs | none
    data_dir: str | None = None  # SentEval layout, for stsb_dev (None: $MIXCSE_DATA, ./data, ~/.cache/mixcse/data)
    select_data: str | None = None  # retrieval: a BEIR folder; pairs: a .tsv/.csv of sentence1, sentence2, score
    select_split: str = "train"  # retrieval: the qrels split to select on (never test)
    select_docs: int | None = None  # retrieval: distractor documents in the selection sub-corpus (None: default)
    # inference length saved with best/ and used by selection; None = the starting model's own (e.g. 256 for
    # all-MiniLM-L6-v2), which training's max_seq_length does not change
    inference_max_seq_length: int | None = None
    # also save every scored candidate (the start model included) as a model in candidates/step-N/, to compare
    # them later on data selection must not see (e.g. a test split); one model's size on disk per evaluation
    save_candidates: bool = False
    # labelled pair files never used for selection, scored on the start model and on best/ at the end of the run
    # (summary.json "test_pairs", the model card, the closing report): the held-out figure of an adaptation run
    test_pairs: list[str] | None = None
    # the forgetting guard: "stsb_dev" or a labelled pairs / graded file scored on every candidate; a candidate more
    # than guard_tolerance points below the start model's guard score is refused (the start model always passes)
    # one guard or a list ([stsb_dev, keep.tsv]); a candidate passes when every guard passes
    guard_data: str | list[str] | None = None
    guard_tolerance: float | list[float] = 0.5  # one for every guard, or one per guard
    # blends (1 - a) * start + a * checkpoint as selection candidates (training/selection.py). "search" (also when
    # unset): a checkpoint that beats every candidate but fails a guard gets its blend weight searched (bisection);
    # a list adds fixed weights at every evaluation, "auto" the grid 0.25, 0.5, 0.75 (the search stays on);
    # "none": no blends, no search
    interpolate: list[float] | str | None = None
    eval_steps: int = 125
    eval_batch_size: int = 64  # sentences per inference batch (a 2-core CPU encodes faster at 64 than at 128)
    analysis_at_eval: bool = False  # also log alignment/uniformity/max angle of STS-B dev at each evaluation
    early_stopping_patience: int | None = None  # evaluations without improvement before stopping
    save_steps: int | None = None  # resumable checkpoint cadence; defaults to eval_steps
    log_steps: int = 10
    report_to: str = "none"  # none | tensorboard | wandb | "tensorboard,wandb" (mixcse/training/tracking.py)


reserve_keys(typing.get_type_hints(_Fields))  # a lever's key is never a field's name


class TrainConfig(_Fields):
    """Every recipe key: the fields of ``_Fields`` and the registered levers' keys (their defaults when unset)."""

    def __init__(self, **values):
        levers = lever_keys()
        own = {key: values.pop(key) for key in list(values) if key in levers}
        unknown = sorted(set(values) - set(typing.get_type_hints(_Fields)))
        if unknown:
            raise TypeError(f"TrainConfig has no key {unknown[0]!r}")
        super().__init__(**values)
        object.__setattr__(self, "_levers", {key: own[key] if key in own else copy.deepcopy(default)
                                             for key, (_, default) in levers.items()})

    def __getattr__(self, name: str):  # only for names that are not fields: the levers' keys
        values = self.__dict__.get("_levers")
        if values is not None and name in values:
            return values[name]
        spec = lever_keys().get(name)  # a lever registered after this config was built: its default
        if spec is not None:
            return spec[1]
        raise AttributeError(f"{type(self).__name__} has no key {name!r}")

    def __setattr__(self, name: str, value) -> None:
        if name in lever_keys():
            self.__dict__.setdefault("_levers", {})[name] = value
        else:
            super().__setattr__(name, value)

    def __eq__(self, other) -> bool:
        return isinstance(other, TrainConfig) and self.to_dict() == other.to_dict()

    def __copy__(self) -> "TrainConfig":
        return TrainConfig(**copy.deepcopy(self.to_dict()))

    def __repr__(self) -> str:
        return f"TrainConfig({', '.join(f'{k}={v!r}' for k, v in self.to_dict().items())})"

    def replace(self, **changes) -> "TrainConfig":
        """A copy with ``changes`` (fields and lever keys alike; ``dataclasses.replace`` knows only the fields)."""
        return TrainConfig(**(copy.deepcopy(self.to_dict()) | changes))

    def objective(self) -> ContrastiveObjective:
        try:
            return objective_from_preset(
                self.loss, lam=self.lam, temperature=self.temperature, directions=self.directions,
                mix_grad=self.mix_grad, lam_bound=self.lam_bound,
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def forward_buckets(self, device_type: str) -> int:
        """``length_buckets`` as set, or its default for the device (4 on CPU, 1 elsewhere)."""
        if self.length_buckets is not None:
            return self.length_buckets
        return 4 if device_type == "cpu" else 1

    def to_dict(self) -> dict:
        return dataclasses.asdict(self) | {key: copy.deepcopy(getattr(self, key)) for key in lever_keys()}

    def validate(self) -> "TrainConfig":
        for name in ("model", "train_file", "output_dir"):
            if not getattr(self, name):
                raise ConfigError(f"config key {name!r} is required")
        if self.loss not in PRESETS:
            raise ConfigError(f"loss must be one of {', '.join(PRESETS)}, got {self.loss!r}")
        if self.pooler not in POOLERS:
            raise ConfigError(f"pooler must be one of {', '.join(POOLERS)}, got {self.pooler!r}")
        if self.select_on not in select_on_values():
            raise ConfigError(f"select_on must be one of {', '.join(select_on_values())}, got {self.select_on!r}")
        parse_report_to(self.report_to)
        if self.select_split == "test":
            raise ConfigError("select_split test is refused: select on train (or dev), report on test")
        if self.precision not in TRAIN_PRECISIONS:
            raise ConfigError(f"precision must be one of {', '.join(TRAIN_PRECISIONS)}, got {self.precision!r}")
        positive = ["batch_size", "max_seq_length", "epochs", "eval_steps", "log_steps", "eval_batch_size"]
        for name in positive + ["max_steps", "save_steps", "max_sentences", "early_stopping_patience", "num_threads",
                                "length_buckets", "select_docs", "mini_batch_size", "inference_max_seq_length",
                                "min_words"]:
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"config key {name!r} must be >= 1, got {value}")
        if self.corpus not in CORPORA:
            raise ConfigError(f"corpus must be one of {', '.join(CORPORA)}, got {self.corpus!r}")
        if self.segment is not None and self.segment not in SEGMENTS:
            raise ConfigError(f"segment must be one of {', '.join(SEGMENTS)}, got {self.segment!r}")
        if self.text_column is not None and not self.text_column.strip():
            raise ConfigError("text_column must name a column (or be null for the default)")
        if self.mini_batch_size is not None and self.batch_size % self.mini_batch_size:
            raise ConfigError(f"mini_batch_size {self.mini_batch_size} does not divide batch_size {self.batch_size}: "
                              f"the batch is encoded in equal chunks")
        if self.batch_size < 2:
            raise ConfigError("batch_size must be >= 2: in-batch negatives need a second sentence")
        for name in float_keys():  # nan passes every comparison below, so finiteness is checked first
            value = getattr(self, name)
            if value is not None and not isinstance(value, list) and not math.isfinite(value):
                raise ConfigError(f"config key {name!r} must be a finite number, got {value}")
        for name in ("learning_rate", "temperature", "max_grad_norm"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"config key {name!r} must be > 0, got {value}")
        if self.weight_decay < 0:
            raise ConfigError(f"config key 'weight_decay' must be >= 0, got {self.weight_decay}")
        if not 0 <= self.warmup_ratio < 1:
            raise ConfigError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        self._validate_adaptation()
        self.objective()  # checks lam / directions / mix_grad ranges
        return self

    def _validate_adaptation(self) -> None:
        for lever in LEVERS.values():
            lever.check(self)
        tolerances = self.guard_tolerance if isinstance(self.guard_tolerance, list) else [self.guard_tolerance]
        if not all(math.isfinite(t) and t >= 0 for t in tolerances) or not tolerances:
            raise ConfigError(f"config key 'guard_tolerance' must be >= 0 and finite (a number, or one per guard), "
                              f"got {self.guard_tolerance}")
        n_guards = 0 if self.guard_data is None else 1 if isinstance(self.guard_data, str) else len(self.guard_data)
        if isinstance(self.guard_tolerance, list) and len(self.guard_tolerance) != n_guards:
            raise ConfigError(f"guard_tolerance lists {len(self.guard_tolerance)} tolerances for {n_guards} "
                              f"guard_data entries; give one number, or one per guard")
        if isinstance(self.guard_data, list) and not self.guard_data:
            raise ConfigError("guard_data is an empty list; leave it unset for no guard")
        if self.guard_data is not None and self.select_on == "none":
            raise ConfigError("guard_data guards checkpoint selection: set select_on (pairs, stsb_dev, retrieval)")
        if self.interpolate is not None and self.interpolate not in ("search", "none"):
            if self.select_on == "none":
                raise ConfigError("interpolate adds blends as selection candidates: set select_on")
            if isinstance(self.interpolate, str) and self.interpolate != "auto":
                raise ConfigError(f"interpolate must be a list of numbers, search, auto or none, got "
                                  f"{self.interpolate!r}")
            if isinstance(self.interpolate, list) and (
                    not self.interpolate or not all(math.isfinite(a) and a > 0 for a in self.interpolate)):
                raise ConfigError(f"interpolate must list blend weights > 0 (1.0 = the checkpoint itself, above 1 "
                                  f"extrapolates), got {self.interpolate}")

    def guard_list(self) -> list[tuple[str, float]]:
        """[(guard data, tolerance)] of every guard."""
        data = [] if self.guard_data is None else [self.guard_data] if isinstance(self.guard_data, str) \
            else list(self.guard_data)
        tolerances = (self.guard_tolerance if isinstance(self.guard_tolerance, list)
                      else [self.guard_tolerance] * len(data))
        return list(zip(data, tolerances))

    def blend_weights(self) -> list[float]:
        """The candidates' weights on the checkpoint at each evaluation: 1.0 (the checkpoint) and the blends."""
        if self.interpolate is None or self.interpolate in ("search", "none"):
            return [1.0]
        alphas = [0.25, 0.5, 0.75] if self.interpolate == "auto" else list(self.interpolate)
        return [1.0] + sorted({float(a) for a in alphas} - {1.0})


def _allowed_types(annotation) -> tuple[type, ...]:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(a for a in args)
    return (annotation,)


def key_types() -> dict:
    """{recipe key: its type}: the fields' and the registered levers'."""
    return typing.get_type_hints(_Fields) | {key: kind for key, (kind, _) in lever_keys().items()}


def float_keys() -> tuple[str, ...]:
    """Every float-typed key, checked for finiteness in validate()."""
    return tuple(name for name, hint in key_types().items() if float in _allowed_types(hint))


def _coerce(name: str, value, annotation):
    allowed = _allowed_types(annotation)
    if value is None and type(None) in allowed:
        return None
    for kind in allowed:
        if kind is bool and isinstance(value, bool):
            return value
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if kind is float and isinstance(value, str):  # YAML 1.1 reads "3e-5" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        if kind is str and isinstance(value, str):
            return value
        if typing.get_origin(kind) is list and typing.get_args(kind) == (str,):  # one string is a list of one
            if isinstance(value, str):
                return [value]
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return list(value)
        if typing.get_origin(kind) is dict and isinstance(value, dict) and all(isinstance(k, str) for k in value):
            number = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value.values())
            if typing.get_args(kind)[1:] != (float,) or number:  # a mapping of names (to numbers)
                return {k: float(v) for k, v in value.items()} if number else dict(value)
        if typing.get_origin(kind) is list and typing.get_args(kind) == (float,):  # a list of numbers
            if isinstance(value, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
                return [float(v) for v in value]
    return _fail_type(name, value, allowed)


def _fail_type(name, value, allowed):
    names = " or ".join("null" if a is type(None) else f"a list of {typing.get_args(a)[0].__name__}s"
                        if typing.get_origin(a) is list else "a mapping of names to numbers"
                        if typing.get_origin(a) is dict else a.__name__ for a in allowed)
    raise ConfigError(f"config key {name!r} must be {names}, got {value!r} ({type(value).__name__})")


def build_config(values: dict) -> TrainConfig:
    hints = key_types()
    known, renamed = set(hints), renamed_keys()
    kwargs = {}
    for key, value in values.items():
        if key in renamed and key not in known:  # an old name of a lever's key
            if renamed[key] in values:
                raise ConfigError(f"config keys {key!r} and {renamed[key]!r} are the same key (the old name and the "
                                  f"new): keep {renamed[key]!r}")
            key = renamed[key]
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"unknown config key {key!r}{hint}")
        kwargs[key] = _coerce(key, value, hints[key])
    return TrainConfig(**kwargs).validate()


def parse_overrides(overrides: list[str]) -> dict:
    """``key=value`` pairs; values are parsed as YAML scalars (3e-5, true, null, 64)."""
    parsed = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        try:
            parsed[key.strip()] = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            parsed[key.strip()] = raw
    return parsed


def load_recipe(path: str | Path | None, overrides: list[str] | dict | None = None) -> TrainConfig:
    values: dict = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"recipe not found: {path}")
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise ConfigError(f"recipe {path} is not valid YAML: {str(exc).splitlines()[0]}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"recipe {path} is not UTF-8 text") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"recipe {path} must be a mapping of config keys")
        values.update(loaded or {})
    if isinstance(overrides, dict):
        values.update(overrides)
    elif overrides:
        values.update(parse_overrides(overrides))
    return build_config(values)
