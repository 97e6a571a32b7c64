"""The memory-mapped corpus (``corpus: disk``) serves the same batches as the in-memory one, from a cache entry
built once, in parallel, atomically; training on it is bit-identical."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import mixcse
from mixcse.data import disk as shards
from mixcse.data.loader import BatchPlan, CorpusLoader
from mixcse.errors import DataError
from mixcse.models.encoder import load_backbone
from mixcse.training.config import TrainConfig

pytestmark = pytest.mark.numeric  # rerun on other arithmetic paths (docs/development.md)


def open_corpus(cfg, tokenizer, **kwargs):
    """Both phases of the corpus loader, as a run opens its corpus."""
    return CorpusLoader(cfg).open(tokenizer, **kwargs)


def config(train_file, tmp_path, **kw) -> TrainConfig:
    values = {"model": "m", "train_file": str(train_file), "output_dir": "o", "batch_size": 16, "max_seq_length": 12,
              "corpus_cache_dir": str(tmp_path / "cache")}
    return TrainConfig(**(values | kw))


@pytest.fixture(scope="module")
def tokenizer(tiny_bert):
    return load_backbone(str(tiny_bert))[1]


@pytest.fixture
def documents(tmp_path, synthetic_data) -> Path:
    """JSON lines with titles, repeated sentences (dedupe) and short ones (min_words)."""
    lines = synthetic_data["corpus"].read_text().splitlines()[:300]
    path = tmp_path / "docs.jsonl"
    with path.open("w") as fh:
        for k in range(0, 300, 3):
            text = f"{lines[k]}. {lines[k + 1]}. {lines[(k + 2) % 30]}. t0w1 t0w2."
            fh.write(json.dumps({"_id": str(k), "title": f"t{k % 8}w3 t{k % 8}w4 about", "text": text}) + "\n")
    return path


def assert_same_corpus(on_disk, memory, n: int) -> None:
    assert len(on_disk) == len(memory)
    plan = BatchPlan(len(memory), 16, seed=TrainConfig.seed)  # the order the in-memory corpus tokenised for
    for step in range(n):
        indices = plan.indices(step)
        a, b = on_disk.batch(indices), memory.batch(indices)
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("kind", ["lines", "documents"])
def test_on_disk_serves_the_in_memory_batches(tmp_path, synthetic_data, documents, tokenizer, kind, monkeypatch):
    # Small shards and chunks, two worker processes: sequences straddle chunk and shard boundaries.
    monkeypatch.setattr(shards, "SHARD_SEQUENCES", 100)
    monkeypatch.setattr(shards, "CHUNK", 64)
    monkeypatch.setattr(shards.os, "cpu_count", lambda: 2)
    train_file = synthetic_data["corpus"] if kind == "lines" else documents
    extra = {"max_sentences": 700} if kind == "lines" else {}
    memory, line_memory = open_corpus(config(train_file, tmp_path, **extra), tokenizer)
    on_disk, line_on_disk = open_corpus(config(train_file, tmp_path, corpus="disk", **extra), tokenizer,
                                      progress=False)
    # the same text figures (the in-memory corpus tokenises only what the run uses: a whole number of batches)
    assert line_on_disk.split("; tokenised")[0] == line_memory.split("; tokenised")[0]
    assert_same_corpus(on_disk, memory, n=len(memory) // 16)
    entry = on_disk.directory
    expected_shards = -(-on_disk.stats["tokens"]["sequences"] // 100)
    assert expected_shards > 1 and len(list(entry.glob("shard-*.ids"))) == expected_shards
    if kind == "documents":
        assert on_disk.stats["text"]["dropped_duplicates"] > 0 and (entry / "rows.npy").exists()


def test_second_open_reuses_the_entry_and_new_content_makes_a_new_one(tmp_path, synthetic_data, tokenizer,
                                                                      monkeypatch):
    corpus_file = tmp_path / "corpus.txt"
    corpus_file.write_text(synthetic_data["corpus"].read_text())
    first, _ = open_corpus(config(corpus_file, tmp_path, corpus="disk"), tokenizer, progress=False)
    built = []
    real_build = shards.build_shards
    monkeypatch.setattr(shards, "build_shards", lambda *a, **k: built.append(1) or real_build(*a, **k))
    again, _ = open_corpus(config(corpus_file, tmp_path, corpus="disk"), tokenizer, progress=False)
    assert not built and again.directory == first.directory
    copy = tmp_path / "copy.txt"  # same content, other name: the same entry
    copy.write_text(corpus_file.read_text())
    assert open_corpus(config(copy, tmp_path, corpus="disk"), tokenizer, progress=False)[0].directory == first.directory
    corpus_file.write_text(corpus_file.read_text() + "one more sentence of words\n")
    changed, _ = open_corpus(config(corpus_file, tmp_path, corpus="disk"), tokenizer, progress=False)
    assert built and changed.directory != first.directory and len(changed) == len(first) + 1
    other_length, _ = open_corpus(config(corpus_file, tmp_path, corpus="disk", max_seq_length=8), tokenizer,
                                  progress=False)
    assert other_length.directory not in (first.directory, changed.directory)


def test_a_failed_build_leaves_no_entry(tmp_path, synthetic_data, tokenizer, monkeypatch, interrupted_at_call):
    monkeypatch.setattr(shards, "CHUNK", 100)
    monkeypatch.setattr(shards.os, "cpu_count", lambda: 1)  # in-process, so that the patch applies
    with interrupted_at_call(shards, "_tokenise", 3):  # fails on the third chunk
        open_corpus(config(synthetic_data["corpus"], tmp_path, corpus="disk"), tokenizer, progress=False)
    assert list((tmp_path / "cache").iterdir()) == []


def test_bad_documents_fail_with_their_line_and_cache_nothing(tmp_path, tokenizer):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine words in a line"}\n{not json\n')
    with pytest.raises(DataError, match="bad.jsonl:2: invalid JSON"):
        open_corpus(config(bad, tmp_path, corpus="disk"), tokenizer, progress=False)
    assert not any((tmp_path / "cache").glob("*/meta.json"))


def read_metrics(out: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k != "sentences_per_second"}
            for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_training_on_disk_equals_training_in_memory(tiny_bert, synthetic_data, tmp_path):
    base = {"model": str(tiny_bert), "train_file": str(synthetic_data["corpus"]), "batch_size": 16, "max_steps": 6,
            "log_steps": 1, "select_on": "none", "max_seq_length": 16, "seed": 3, "num_threads": 1}
    mixcse.train(base | {"output_dir": str(tmp_path / "memory")})
    mixcse.train(base | {"output_dir": str(tmp_path / "disk"), "corpus": "disk",
                         "corpus_cache_dir": str(tmp_path / "cache")})
    assert read_metrics(tmp_path / "memory") == read_metrics(tmp_path / "disk")
    a = torch.load(tmp_path / "memory/checkpoint/state.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "disk/checkpoint/state.pt", weights_only=False)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_batch_plan_order_is_numpys_permutation():
    plan = BatchPlan(1000, 10, seed=4)
    assert np.array_equal(plan.order(1), np.random.default_rng([4, 1]).permutation(1000))
    assert plan.order(0).dtype == np.int32


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc/self/fd (Linux)")
def test_an_entry_with_a_missing_shard_file_fails_without_leaking_descriptors(tmp_path, synthetic_data, tokenizer,
                                                                              monkeypatch):
    import gc
    import os
    import shutil

    monkeypatch.setattr(shards, "SHARD_SEQUENCES", 64)  # several shards from the small corpus
    built, _ = open_corpus(config(synthetic_data["corpus"], tmp_path, corpus="disk"), tokenizer, progress=False)
    entry = tmp_path / "entry"
    shutil.copytree(built.directory, entry)
    del built
    (entry / "shard-00002.ids").unlink()
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(FileNotFoundError):
        shards.ShardedCorpus(entry)
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) == before
