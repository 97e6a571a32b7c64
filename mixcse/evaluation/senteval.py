"""Readers for SentEval's benchmark files.

Each reader mirrors how SentEval (as patched by SimCSE) reads the file -- encoding, line splitting, header
handling, which field is which -- because a different reading gives a different number. Sentences are
whitespace-split and re-joined by single spaces, which is what SentEval's batchers hand to the encoder.
Anything malformed raises :class:`DataError` naming the file and line, instead of silently shifting pairs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mixcse.errors import DataError
from mixcse.utils.files import cache_home

STS_SUBSETS: dict[str, tuple[str, ...]] = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "headlines", "OnWN"),  # SMT is not distributed
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}
TREC_CLASSES = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
_BINARY_FILES = {  # first file gets label 1, second label 0 (SentEval's order)
    "MR": ("MR", "rt-polarity.pos", "rt-polarity.neg"),
    "CR": ("CR", "custrev.pos", "custrev.neg"),
    "SUBJ": ("SUBJ", "subj.objective", "subj.subjective"),
    "MPQA": ("MPQA", "mpqa.pos", "mpqa.neg"),
}


def _join(text: str) -> str:
    return " ".join(text.split())


def data_dir_candidates() -> list[tuple[str, Path]]:
    """Where the SentEval folder is looked for, in order: ``$MIXCSE_DATA``, ``./data``, and the folder
    ``mixcse data download`` fills by default (``~/.cache/mixcse/data``, or ``$MIXCSE_CACHE/data``)."""
    env = os.environ.get("MIXCSE_DATA")
    return ([("$MIXCSE_DATA", Path(env))] if env else []) + [("./data", Path("data")),
                                                              ("the download folder", cache_home() / "data")]


def default_data_dir() -> Path | None:
    """The first existing folder of ``data_dir_candidates()``; None when there is none."""
    return next((path for _, path in data_dir_candidates() if path.exists()), None)


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """Accept both the SentEval `downstream/` folder and its parent (what `mixcse data download` writes)."""
    path = Path(data_dir) if data_dir is not None else default_data_dir()
    if path is None:
        looked = ", ".join(str(p) for _, p in data_dir_candidates())
        raise DataError(f"no SentEval data found (looked in {looked}): run `mixcse data download` (it fills "
                        f"{cache_home() / 'data'}), or pass --data-dir DIR / set $MIXCSE_DATA")
    if (path / "downstream").is_dir() and not (path / "STS").is_dir():
        path = path / "downstream"
    if not path.is_dir():
        raise DataError(f"{path}: benchmark data folder not found (set --data-dir or $MIXCSE_DATA, "
                        f"or run `mixcse data download`)")
    return path


def _need(path: Path) -> Path:
    if not path.parent.is_dir():
        raise DataError(f"{path.parent}: task folder not found (needed for {path.name})")
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    return path


def _read_text(path: Path, encoding: str = "utf-8") -> str:
    try:
        return _need(path).read_bytes().decode(encoding)
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not valid {encoding} text") from None


def _lines_universal(path: Path, encoding: str = "utf-8") -> list[str]:
    """Lines as `for line in open(path)` yields them (universal newlines), without line ends."""
    text = _read_text(path, encoding)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _score(value: str, path: Path, lineno: int) -> float:
    try:
        out = float(value)
    except ValueError:
        raise DataError(f"{path}:{lineno}: score {value.strip()!r} is not a number") from None
    if not np.isfinite(out):
        raise DataError(f"{path}:{lineno}: score {value.strip()!r} is not finite")
    return out


def _fields(line: str, n: int, path: Path, lineno: int, sep: str = "\t") -> list[str]:
    parts = line.split(sep)
    if len(parts) < n:
        raise DataError(f"{path}:{lineno}: expected at least {n} tab-separated fields, found {len(parts)}")
    return parts


@dataclass
class PairSet:
    """Sentence pairs with gold scores or labels."""
    a: list[str]
    b: list[str]
    scores: np.ndarray
    source: str = ""
    lines: list[int] = field(default_factory=list)  # 1-based line numbers in the source, for messages

    def __len__(self) -> int:
        return len(self.a)

    def sentences(self) -> list[str]:
        return self.a + self.b


def load_sts_subset(data_dir: Path, task: str, subset: str) -> PairSet:
    """One STS12-16 subset; gold lines that are empty are unscored pairs and are dropped (as SentEval does)."""
    folder = Path(data_dir) / "STS" / f"{task}-en-test"
    if not folder.is_dir():
        raise DataError(f"{folder}: task folder not found")
    inp = folder / f"STS.input.{subset}.txt"
    gold = folder / f"STS.gs.{subset}.txt"
    in_lines = _read_text(inp).splitlines()  # SentEval: read().splitlines()
    gs_lines = _read_text(gold).splitlines()
    if len(in_lines) != len(gs_lines):
        n = min(len(in_lines), len(gs_lines)) + 1
        longer = inp if len(in_lines) > len(gs_lines) else gold
        raise DataError(f"{longer}:{n}: {inp.name} has {len(in_lines)} lines but {gold.name} has "
                        f"{len(gs_lines)}; line {n} has no counterpart")
    a, b, scores, lines = [], [], [], []
    for i, (pair, gs) in enumerate(zip(in_lines, gs_lines), start=1):
        if gs == "":
            continue
        fields = _fields(pair, 2, inp, i)
        a.append(_join(fields[0]))
        b.append(_join(fields[1]))
        scores.append(_score(gs, gold, i))
        lines.append(i)
    return PairSet(a, b, np.asarray(scores, dtype=np.float64), f"{task}/{subset}", lines)


def load_sts(data_dir: Path, task: str) -> dict[str, PairSet]:
    return {s: load_sts_subset(data_dir, task, s) for s in STS_SUBSETS[task]}


def load_stsb(data_dir: Path, split: str = "test") -> PairSet:
    """STS-B `sts-{split}.csv`: score in field 5, sentences in fields 6 and 7 (tab-separated)."""
    path = Path(data_dir) / "STS" / "STSBenchmark" / f"sts-{split}.csv"
    a, b, scores, lines = [], [], [], []
    for i, line in enumerate(_lines_universal(path), start=1):
        f = _fields(line.strip(), 7, path, i)
        a.append(_join(f[5]))
        b.append(_join(f[6]))
        scores.append(_score(f[4], path, i))
        lines.append(i)
    return PairSet(a, b, np.asarray(scores, dtype=np.float64), f"STSBenchmark/{split}", lines)


def load_sick(data_dir: Path, split: str = "test_annotated") -> PairSet:
    """SICK: one header line, CRLF ends; relatedness is field 4."""
    path = Path(data_dir) / "SICK" / f"SICK_{split}.txt"
    a, b, scores, lines = [], [], [], []
    for i, line in enumerate(_lines_universal(path), start=1):
        if i == 1:
            continue
        f = _fields(line.strip(), 4, path, i)
        a.append(_join(f[1]))
        b.append(_join(f[2]))
        scores.append(_score(f[3], path, i))
        lines.append(i)
    return PairSet(a, b, np.asarray(scores, dtype=np.float64), f"SICK/{split}", lines)


@dataclass
class LabelledSet:
    sentences: list[str]
    labels: np.ndarray
    source: str = ""


def _by_length_and_label(n_tokens: list[int], labels: list[int], *extra: list[int]) -> np.ndarray:
    """SentEval sorts each split by (token count, label) before embedding and before its CV splits; the
    fold assignment of StratifiedKFold depends on that order, so it is reproduced exactly (stable sort)."""
    keys = list(zip(n_tokens, *extra, labels))
    return np.asarray(sorted(range(len(keys)), key=keys.__getitem__), dtype=np.int64)


def load_binary(data_dir: Path, task: str) -> LabelledSet:
    """MR/CR/SUBJ/MPQA, read as latin-1 like SentEval; empty lines are kept as empty sentences."""
    folder, first, second = _BINARY_FILES[task]
    pos = _lines_universal(Path(data_dir) / folder / first, "latin-1")
    neg = _lines_universal(Path(data_dir) / folder / second, "latin-1")
    tokens = [line.split() for line in pos + neg]
    labels = [1] * len(pos) + [0] * len(neg)
    order = _by_length_and_label([len(t) for t in tokens], labels)
    return LabelledSet([" ".join(tokens[i]) for i in order], np.asarray(labels)[order], task)


def load_sst2(data_dir: Path) -> dict[str, LabelledSet]:
    out = {}
    for split, name in (("train", "train"), ("dev", "dev"), ("test", "test")):
        path = Path(data_dir) / "SST" / "binary" / f"sentiment-{name}"
        tokens, labels = [], []
        for i, line in enumerate(_lines_universal(path), start=1):
            f = _fields(line.strip(), 2, path, i)
            try:
                labels.append(int(f[1]))
            except ValueError:
                raise DataError(f"{path}:{i}: label {f[1]!r} is not an integer") from None
            tokens.append(f[0].split())
        order = _by_length_and_label([len(t) for t in tokens], labels)
        out[split] = LabelledSet([" ".join(tokens[i]) for i in order], np.asarray(labels, dtype=np.int64)[order],
                                 f"SST2/{split}")
    return out


def load_trec(data_dir: Path) -> dict[str, LabelledSet]:
    """TREC-6: label is the coarse class before ':'; the fine label (up to the first space) is dropped."""
    out = {}
    for split, name in (("train", "train_5500.label"), ("test", "TREC_10.label")):
        path = Path(data_dir) / "TREC" / name
        tokens, labels = [], []
        for i, line in enumerate(_lines_universal(path, "latin-1"), start=1):
            target, sep, rest = line.strip().partition(":")
            if not sep or " " not in rest:
                raise DataError(f"{path}:{i}: expected 'COARSE:fine question', got {line.strip()[:60]!r}")
            if target not in TREC_CLASSES:
                raise DataError(f"{path}:{i}: unknown TREC class {target!r}")
            tokens.append(rest.split(" ", 1)[1].split())
            labels.append(TREC_CLASSES.index(target))
        order = _by_length_and_label([len(t) for t in tokens], labels)
        out[split] = LabelledSet([" ".join(tokens[i]) for i in order], np.asarray(labels, dtype=np.int64)[order],
                                 f"TREC/{split}")
    return out


def load_mrpc(data_dir: Path) -> dict[str, PairSet]:
    """MRPC: header line (with a BOM), quality label in field 1, sentences in fields 4 and 5."""
    out = {}
    for split in ("train", "test"):
        path = Path(data_dir) / "MRPC" / f"msr_paraphrase_{split}.txt"
        a, b, labels = [], [], []
        for i, line in enumerate(_lines_universal(path), start=1):
            if i == 1:
                continue
            f = _fields(line.strip(), 5, path, i)
            if f[0] not in ("0", "1"):
                raise DataError(f"{path}:{i}: label {f[0]!r} is not 0 or 1")
            a.append(f[3].split())
            b.append(f[4].split())
            labels.append(int(f[0]))
        order = _by_length_and_label([len(t) for t in a], labels, [len(t) for t in b])
        out[split] = PairSet([" ".join(a[i]) for i in order], [" ".join(b[i]) for i in order],
                             np.asarray(labels, dtype=np.int64)[order], f"MRPC/{split}")
    return out
