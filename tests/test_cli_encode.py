"""``mixcse encode`` / ``mixcse search`` and ``SentenceEncoder.search``."""

from __future__ import annotations

import numpy as np
import pytest

from mixcse.models import search as search_mod
from mixcse.cli import main
from mixcse.models.sentence_encoder import SentenceEncoder

# Lengths vary so that length-sorted batches reorder them.
SENTENCES = ["t0w1 t0w2 the t1w3", "a t3w4 t3w5 t3w6 t3w7 of t5w1 t5w2 t5w3 t5w4 t5w5", "t7w7",
             "t2w2 and t2w3 t4w4 t4w5 in", "t6w0 t6w1 t6w2 t6w3 t6w4 t6w5 t6w6 t6w7 t6w8 t6w9 t6w10 t0w0",
             "of t1w1", "t5w5 t5w6 t5w7 the t6w6 t6w7 t6w8 t6w9"]


@pytest.fixture(scope="module")
def model_dir(tiny_avg_model):
    return tiny_avg_model


@pytest.fixture(scope="module")
def reference(model_dir):
    """Each sentence encoded alone: no padding, no batching."""
    encoder = SentenceEncoder.load(model_dir)
    return np.stack([encoder.encode([s])[0] for s in SENTENCES])


@pytest.fixture()
def corpus_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(SENTENCES[:3] + ["", "   "] + SENTENCES[3:]) + "\n")  # blank lines are skipped
    return path


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


# ------------------------------------------------------------------------------------------------- encode
@pytest.mark.parametrize("suffix", [".npy", ".safetensors"])
def test_encode_writes_rows_in_input_order(model_dir, reference, corpus_file, tmp_path, capsys, suffix):
    output = tmp_path / f"emb{suffix}"
    code, out, err = run(capsys, "encode", model_dir, "--input", corpus_file, "--output", output,
                         "--batch-size", 2, "--no-progress")
    assert code == 0, err
    assert "wrote 7 x 64 embeddings (pooler avg)" in out
    assert "skipped 2 blank lines" in err
    if suffix == ".npy":
        emb = np.load(output)
    else:
        from safetensors import safe_open

        with safe_open(str(output), framework="numpy") as fh:
            emb = fh.get_tensor("embeddings")
            assert fh.metadata()["pooler"] == "avg" and fh.metadata()["rows"] == "7"
    assert emb.dtype == np.float32 and emb.shape == (len(SENTENCES), 64)
    np.testing.assert_allclose(emb, reference, atol=1e-5)


def test_encode_normalize_and_overwrite(model_dir, corpus_file, tmp_path, capsys):
    output = tmp_path / "emb.npy"
    assert run(capsys, "encode", model_dir, "--input", corpus_file, "--output", output)[0] == 0
    first = output.read_bytes()
    code, _, err = run(capsys, "encode", model_dir, "--input", corpus_file, "--output", output, "--normalize")
    assert code == 2 and err.strip() == f"error: {output} exists; pass --overwrite to replace it"
    assert output.read_bytes() == first
    code, _, _ = run(capsys, "encode", model_dir, "--input", corpus_file, "--output", output, "--normalize",
                     "--overwrite")
    assert code == 0
    np.testing.assert_allclose(np.linalg.norm(np.load(output), axis=1), 1.0, atol=1e-5)
    assert not list(tmp_path.glob(".emb.npy.*")), "temp file left behind"


@pytest.mark.parametrize("content, message", [
    (None, "error: input file not found: "),
    ("", "error: input file has no sentences (it is empty or blank): "),
    ("\n  \n\n", "error: input file has no sentences (it is empty or blank): "),
    (b"caf\xe9\n", "not UTF-8 text"),
])
def test_encode_rejects_missing_or_empty_input(model_dir, tmp_path, capsys, content, message):
    path = tmp_path / "input.txt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    code, out, err = run(capsys, "encode", model_dir, "--input", path, "--output", tmp_path / "emb.npy")
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "emb.npy").exists()


def test_encode_rejects_bad_output_and_model(model_dir, corpus_file, tmp_path, capsys):
    code, _, err = run(capsys, "encode", model_dir, "--input", corpus_file, "--output", tmp_path / "emb.txt")
    assert code == 2 and "--output must end in .npy or .safetensors" in err
    code, _, err = run(capsys, "encode", tmp_path / "no-model", "--input", corpus_file, "--output",
                       tmp_path / "emb.npy")
    assert code == 2 and "model path does not exist" in err
    with pytest.raises(SystemExit):  # argparse: --batch-size must be positive
        main(["encode", str(model_dir), "--input", str(corpus_file), "--output", "x.npy", "--batch-size", "0"])


# ------------------------------------------------------------------------------------------------- search
def parse_hits(out: str) -> list[tuple[int, float, str]]:
    hits = []
    for line in out.splitlines():
        if line and not line.startswith("query: "):
            rank, score, sentence = line.split(maxsplit=2)
            hits.append((int(rank), float(score), sentence))
    return hits


def test_search_prints_rank_score_sentence(model_dir, reference, corpus_file, capsys):
    query = SENTENCES[4]
    code, out, err = run(capsys, "search", model_dir, "--corpus", corpus_file, "--query", query, "--top-k", 3,
                         "--index", "numpy")
    assert code == 0, err
    assert out.splitlines()[0] == f"query: {query}"
    hits = parse_hits(out)
    assert [h[0] for h in hits] == [1, 2, 3]
    assert hits[0][2] == query and hits[0][1] == pytest.approx(1.0, abs=1e-4)
    scores = SentenceEncoder.similarity(reference[4], reference)[0]
    expected = np.argsort(-scores, kind="stable")[:3]
    assert [h[2] for h in hits] == [SENTENCES[i] for i in expected]
    assert [h[1] for h in hits] == pytest.approx([float(scores[i]) for i in expected], abs=1e-4)


def test_search_with_stored_embeddings_and_backends(model_dir, corpus_file, tmp_path, capsys):
    emb = tmp_path / "corpus.safetensors"
    assert run(capsys, "encode", model_dir, "--input", corpus_file, "--output", emb)[0] == 0
    args = ["search", model_dir, "--corpus", corpus_file, "--query", SENTENCES[0], "--query", "t7w7 t6w6",
            "--top-k", 10]
    code, fresh, _ = run(capsys, *args, "--index", "numpy")
    assert code == 0 and fresh.count("query: ") == 2
    assert len(parse_hits(fresh)) == 2 * len(SENTENCES)  # top-k is capped at the corpus size
    code, stored, _ = run(capsys, *args, "--index", "numpy", "--corpus-embeddings", emb)
    assert code == 0 and stored == fresh
    if search_mod.faiss_available():
        code, with_faiss, _ = run(capsys, *args, "--index", "faiss")
        assert code == 0
        assert [h[2] for h in parse_hits(with_faiss)] == [h[2] for h in parse_hits(fresh)]


def test_search_errors(model_dir, corpus_file, tmp_path, capsys, monkeypatch):
    wrong = tmp_path / "wrong.npy"
    np.save(wrong, np.zeros((3, 64), dtype=np.float32))
    code, _, err = run(capsys, "search", model_dir, "--corpus", corpus_file, "--query", "x",
                       "--corpus-embeddings", wrong)
    assert code == 2 and "has 3 rows but --corpus has 7 sentences" in err
    code, _, err = run(capsys, "search", model_dir, "--corpus", tmp_path / "none.txt", "--query", "x")
    assert code == 2 and "corpus file not found" in err
    code, _, err = run(capsys, "search", model_dir, "--corpus", corpus_file, "--query", " ")
    assert code == 2 and "--query must not be empty" in err
    monkeypatch.setattr(search_mod, "faiss_available", lambda: False)
    code, _, err = run(capsys, "search", model_dir, "--corpus", corpus_file, "--query", "x", "--index", "faiss")
    assert code == 2 and "pip install 'mixcse[faiss]'" in err


# ----------------------------------------------------------------------------------------------- Python API
def test_sentence_encoder_search(model_dir, reference):
    encoder = SentenceEncoder.load(model_dir)
    hits = encoder.search(SENTENCES[1], SENTENCES, top_k=2, backend="numpy")
    assert len(hits) == 1 and len(hits[0]) == 2
    assert hits[0][0].index == 1 and hits[0][0].sentence == SENTENCES[1]
    assert hits[0][0].score == pytest.approx(1.0, abs=1e-5)
    from_array = encoder.search([SENTENCES[1], SENTENCES[2]], reference, top_k=2, backend="numpy")
    assert [h.index for h in from_array[0]] == [h.index for h in hits[0]]
    assert from_array[0][0].sentence is None and len(from_array) == 2
    assert encoder.search([], SENTENCES) == []


@pytest.mark.parametrize("backend", ["numpy", "faiss"])
def test_top_k_cosine_matches_brute_force(backend):
    assert backend != "faiss" or search_mod.faiss_available(), "the [test] extra installs faiss-cpu"
    rng = np.random.default_rng(0)
    corpus = rng.normal(size=(300, 16)).astype(np.float32)
    queries = np.concatenate([rng.normal(size=(5, 16)), corpus[[7, 42]] * 3.0]).astype(np.float32)
    scores, indices = search_mod.top_k_cosine(queries, corpus, 8, backend=backend, block=3)
    sim = search_mod.normalize_rows(queries) @ search_mod.normalize_rows(corpus).T
    expected = np.argsort(-sim, axis=1, kind="stable")[:, :8]
    np.testing.assert_array_equal(indices, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(sim, expected, axis=1), atol=1e-5)
    assert list(indices[5:, 0]) == [7, 42]
    with pytest.raises(Exception, match="top_k must be >= 1"):
        search_mod.top_k_cosine(queries, corpus, 0)


def test_encode_progress_off_a_terminal_is_plain_lines(model_dir):
    import io

    from mixcse.utils.progress import Progress

    stream = io.StringIO()  # not a terminal
    encoder = SentenceEncoder.load(model_dir)
    original = Progress.__init__

    def into_stream(self, *args, **kwargs):
        original(self, *args, **{**kwargs, "stream": stream})

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Progress, "__init__", into_stream)
        encoder.encode(SENTENCES, batch_size=2, show_progress=True, progress_every=0)
        lines = stream.getvalue().splitlines()
        assert len(lines) >= len(SENTENCES) // 2 and all(line.startswith("encode: ") for line in lines)
        assert lines[-1].startswith(f"encode: {len(SENTENCES)}/{len(SENTENCES)} sentences (100%)")
        assert "\r" not in stream.getvalue()
        stream.truncate(0)
        encoder.encode(SENTENCES, show_progress=False)
        assert stream.getvalue() == ""


def test_encode_cli_reports_progress_on_stderr_unless_asked_not_to(model_dir, corpus_file, tmp_path, capsys):
    code, _, err = run(capsys, "encode", model_dir, "--input", corpus_file, "--output", tmp_path / "a.npy")
    assert code == 0 and "encode: " in err and "sentences (100%)" in err
    code, _, err = run(capsys, "encode", model_dir, "--input", corpus_file, "--output", tmp_path / "b.npy",
                       "--no-progress")
    assert code == 0 and "encode: " not in err


def test_encode_and_search_in_bf16(model_dir, corpus_file, tmp_path, capsys):
    """--precision bf16: torch under bfloat16 autocast, float32 rows close to fp32's but not its bits; the
    metadata says which precision wrote them."""
    from safetensors import safe_open

    fp32, bf16 = tmp_path / "fp32.safetensors", tmp_path / "bf16.safetensors"
    assert run(capsys, "encode", model_dir, "--input", corpus_file, "--output", fp32)[0] == 0
    assert run(capsys, "encode", model_dir, "--input", corpus_file, "--output", bf16, "--precision", "bf16")[0] == 0
    with safe_open(str(fp32), framework="numpy") as a, safe_open(str(bf16), framework="numpy") as b:
        x, y = a.get_tensor("embeddings"), b.get_tensor("embeddings")
        assert b.metadata()["precision"] == "bf16" and y.dtype == np.float32
    assert not np.array_equal(x, y)
    assert (SentenceEncoder.similarity(x, y).diagonal() > 0.99).all()
    code, out, _ = run(capsys, "search", model_dir, "--corpus", corpus_file, "--query", SENTENCES[4], "--top-k", 1,
                       "--precision", "bf16", "--index", "numpy")
    assert code == 0 and parse_hits(out)[0][2] == SENTENCES[4]
    code, _, err = run(capsys, "encode", model_dir, "--input", corpus_file, "--output", tmp_path / "x.npy",
                       "--backend", "onnx", "--precision", "bf16")
    assert code == 2 and "--precision bf16 needs --backend torch" in err and not (tmp_path / "x.npy").exists()
