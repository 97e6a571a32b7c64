"""Fixtures shared by tests/ and benchmarks/tests/: a tiny BERT built from a config (the paper's architecture), a
synthetic corpus, and a way to "kill" a process at a chosen point."""

from __future__ import annotations

import contextlib
import json
import os
import random
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# The example data beside the repository (SentEval files, domain data, the stand-in model): `../shared`, or the folder
# $MIXCSE_SHARED names. Tests that need it say so one way, ``needs_example_data``; the library finds SentEval data
# through $MIXCSE_DATA, as a user's machine would.
SHARED = Path(os.environ.get("MIXCSE_SHARED") or Path(__file__).resolve().parent.parent / "shared")
STAND_IN = SHARED / "models" / "mini-wiki-mlm"
DOWNSTREAM = SHARED / "data" / "downstream"
DOMAIN = SHARED / "data" / "domain"
if DOWNSTREAM.is_dir():
    os.environ.setdefault("MIXCSE_DATA", str(DOWNSTREAM))

# Eight "topics" of twelve made-up words each; a sentence draws its words from two topics.
TOPICS = [[f"t{t}w{w}" for w in range(12)] for t in range(8)]
FILLER = ["the", "a", "of", "and", "in", "to"]


def make_tiny_bert(directory: Path, *, vocab: list[str], layers: int = 2, hidden: int = 64,
                   dropout: float = 0.1, seed: int = 0, exact_init: bool = False) -> Path:
    """A 2-layer BERT at toy size. ``exact_init``: every weight matrix drawn as integers times a power of two (the same
    bits on every CPU; torch's normal init runs a different kernel per instruction set, and its last bits differ)."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    directory.mkdir(parents=True, exist_ok=True)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    (directory / "vocab.txt").write_text("\n".join(specials + vocab) + "\n")
    tokens = specials + vocab
    tokenizer = BertTokenizer(vocab={tok: i for i, tok in enumerate(tokens)}, do_lower_case=True)
    tokenizer.save_pretrained(directory)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(specials) + len(vocab), hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=128,
                        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    model = BertModel(config)
    if exact_init:
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for _, param in sorted(model.named_parameters()):
                if param.ndim >= 2:  # uniform on +-2^-5 (std 0.018, BERT's init has 0.02), in steps of 2^-15
                    param.copy_(torch.randint(-1024, 1025, param.shape, generator=generator).float() * 2.0 ** -15)
    model.save_pretrained(directory, safe_serialization=True)
    return directory


def make_tiny_modernbert(directory: Path, *, vocab: list[str], layers: int = 2, hidden: int = 64,
                         dropout: float = 0.1, seed: int = 0) -> Path:
    """The stand-in's architecture (ModernBERT: rotary positions, GeGLU, local/global attention) at toy size, with
    the tiny BERT's word-piece vocabulary."""
    import torch
    from transformers import BertTokenizer, ModernBertConfig, ModernBertModel

    directory.mkdir(parents=True, exist_ok=True)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens = specials + vocab
    BertTokenizer(vocab={tok: i for i, tok in enumerate(tokens)}, do_lower_case=True).save_pretrained(directory)
    torch.manual_seed(seed)
    config = ModernBertConfig(vocab_size=len(tokens), hidden_size=hidden, num_hidden_layers=layers,
                              num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=128,
                              pad_token_id=0, cls_token_id=2, sep_token_id=3, bos_token_id=2, eos_token_id=3,
                              embedding_dropout=dropout, attention_dropout=dropout, mlp_dropout=dropout)
    ModernBertModel(config).save_pretrained(directory, safe_serialization=True)
    return directory


def synthetic_sentence(rng: random.Random, topics: tuple[int, int], n_words: int = 8) -> str:
    words = [rng.choice(TOPICS[topics[w % 2]]) for w in range(n_words)]
    words.insert(rng.randrange(len(words)), rng.choice(FILLER))
    return " ".join(words)


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    vocab = FILLER + [w for topic in TOPICS for w in topic]
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), vocab=vocab)


@pytest.fixture(scope="session")
def tiny_avg_model(tiny_bert, tmp_path_factory) -> Path:
    """tiny_bert saved as a mixcse model folder with mean pooling (an inference model: no MLP head)."""
    from mixcse.models.encoder import load_encoder

    encoder, tokenizer, _ = load_encoder(str(tiny_bert), pooler="avg")
    path = tmp_path_factory.mktemp("tiny-avg") / "model"
    encoder.save(path, tokenizer)
    return path


@pytest.fixture(scope="session")
def tiny_modernbert(tmp_path_factory) -> Path:
    vocab = FILLER + [w for topic in TOPICS for w in topic]
    return make_tiny_modernbert(tmp_path_factory.mktemp("tiny-modernbert"), vocab=vocab)


def write_synthetic_data(root: Path) -> dict[str, Path]:
    """A corpus of two-topic sentences and an STS-B-shaped dev set with a known answer that word overlap cannot
    give away: the gold score is the number of topics two sentences share (0, 1, 2 -> 0, 2.5, 5), and the second
    sentence never reuses a word of the first. An untrained encoder scores ~0; one that learnt the corpus's
    co-occurrence structure scores well above."""
    rng = random.Random(0)
    pairs_of_topics = [(a, b) for a in range(8) for b in range(8) if a < b]
    corpus = [synthetic_sentence(rng, rng.choice(pairs_of_topics)) for _ in range(4000)]
    (root / "corpus.txt").write_text("\n".join(corpus) + "\n")
    sts_dir = root / "downstream" / "STS" / "STSBenchmark"
    sts_dir.mkdir(parents=True, exist_ok=True)
    lines = []
    for k in range(300):
        t1 = rng.choice(pairs_of_topics)
        overlap = k % 3
        t2 = t1 if overlap == 2 else rng.choice([p for p in pairs_of_topics if len(set(p) & set(t1)) == overlap])
        s1 = synthetic_sentence(rng, t1)
        unused = [[w for w in TOPICS[t] if w not in s1.split()] for t in t2]
        s2 = " ".join(rng.choice(unused[i % 2]) for i in range(8))
        lines.append("\t".join(["main-captions", "MSRvid", "2012test", f"{k:04d}", f"{overlap * 2.5:.3f}", s1, s2]))
    (sts_dir / "sts-dev.csv").write_text("\n".join(lines) + "\n")
    (sts_dir / "sts-test.csv").write_text("\n".join(lines) + "\n")
    return {"corpus": root / "corpus.txt", "data_dir": root / "downstream"}


@pytest.fixture(scope="session")
def synthetic_data(tmp_path_factory) -> dict[str, Path]:
    return write_synthetic_data(tmp_path_factory.mktemp("synthetic"))


def write_tiny_beir(root, rng_seed=0):
    """A BEIR folder over the synthetic topic words: each document is about two topics, each query names a word of
    its relevant document's topics; train and test qrels."""
    rng = random.Random(rng_seed)
    root.mkdir(parents=True, exist_ok=True)
    docs = [(f"d{i}", rng.sample(range(8), 2)) for i in range(40)]
    with open(root / "corpus.jsonl", "w") as fh:
        for did, topics in docs:
            words = [rng.choice(TOPICS[t]) for t in topics for _ in range(4)]
            fh.write(json.dumps({"_id": did, "title": "", "text": " ".join(words)}) + "\n")
    (root / "qrels").mkdir(exist_ok=True)
    with open(root / "queries.jsonl", "w") as fq:
        for split, span in (("train", range(0, 20)), ("test", range(20, 30))):
            rows = ["query-id\tcorpus-id\tscore"]
            for i in span:
                did, topics = docs[i]
                fq.write(json.dumps({"_id": f"q{i}", "text": " ".join(rng.choice(TOPICS[t]) for t in topics)}) + "\n")
                rows.append(f"q{i}\t{did}\t1")
            (root / "qrels" / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    return root


# The words of the evaluation fixture files (tests/fixtures/eval/make_downstream.py's WORDS).
FIXTURE_WORDS = ("cat dog man woman child plays runs sings eats reads a the big small red blue green old new fast slow "
                 "house car tree river music book song film good bad great awful").split()


def tiny_vocab() -> list[str]:
    """The tiny BERT's words: the synthetic topics' and every word of the evaluation fixture files, so that no two
    different fixture sentences tokenise alike (no [UNK] runs, whose equal embeddings leave ties that the last bits
    of a CPU's arithmetic break one way or the other)."""
    return list(dict.fromkeys(FILLER + [w for topic in TOPICS for w in topic] + FIXTURE_WORDS))


# descriptive settings of an evaluation that name modules, paths or timings rather than what was computed
VOLATILE = {"seconds", "cpu_seconds", "versions", "data_dir", "cache_dir", "encoding"}


def comparable_results(results: dict) -> dict:
    from mixcse.utils.files import to_jsonable

    results = to_jsonable(results)
    settings = results["settings"]
    for key in VOLATILE:
        settings.pop(key, None)
    settings["classifier"].pop("two_class_folds", None)
    if "retrieval" in settings:
        settings["retrieval"].pop("data_dir", None)
        settings["retrieval"].pop("metric_library", None)
    if "pairs" in settings:
        settings["pairs"]["files"] = [Path(f).name for f in settings["pairs"]["files"]]
    results.get("retrieval", {}).pop("seconds", None)
    for r in results.get("pairs", {}).values():
        r["file"] = Path(r["file"]).name
    return results


def needs_example_data(*paths: Path):
    """Skip unless every path of the example data exists (the one way tests say they need it)."""
    missing = [str(p) for p in paths if not Path(p).exists()]
    return pytest.mark.skipif(bool(missing), reason=f"example data not found: {', '.join(missing)} (set "
                                                    f"MIXCSE_SHARED to the example data folder)")


@pytest.fixture
def interrupted_at_call(monkeypatch):
    """``with interrupted_at_call(module, "name", n): ...`` — the process "dies" (KeyboardInterrupt, which the block
    must raise) at the n-th call of ``module.name``; the real function is back afterwards."""

    @contextlib.contextmanager
    def interrupt(module, name: str, n: int):
        real, calls = getattr(module, name), {"n": 0}

        def dies_at_call_n(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == n:
                raise KeyboardInterrupt
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, dies_at_call_n)
        try:
            with pytest.raises(KeyboardInterrupt):
                yield
        finally:
            monkeypatch.setattr(module, name, real)

    return interrupt


# ------------------------------------------------------------------------------------------------ no silent skips
MISSING_MODULE = ("could not import", "No module named", "not installed")


def skip_is_a_missing_module(reason: str) -> bool:
    """A skip whose reason is a missing package: `pip install -e ".[test]"` installs everything the suite imports,
    so such a skip is a missing install step, not a condition of the machine."""
    return any(marker in reason for marker in MISSING_MODULE)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        if skip_is_a_missing_module(reason):
            report.outcome = "failed"
            report.longrepr = f"skipped for a missing package, which the [test] extra must install: {reason}"
