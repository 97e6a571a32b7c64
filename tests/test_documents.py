"""mixcse/data/documents.py: training text from documents (jsonl, csv, tsv, parquet) and plain lines; its stats and
errors; the config keys; the tokenisation stats; what `mixcse train` prints and refuses."""

from __future__ import annotations

import csv
import gzip
import json

import numpy as np
import pytest

from mixcse.cli import main
from mixcse.data.documents import (
    DOCUMENT_MIN_WORDS,
    _Seen,
    describe,
    file_format,
    read_segments,
    read_training_text,
    split_sentences,
)
from mixcse.data.loader import Corpus
from mixcse.data.memory import TokenizedCorpus
from mixcse.errors import ConfigError, DataError
from mixcse.training.config import build_config

# Two BEIR-shaped documents: titles without a final stop, a heading shorter than 4 words, a sentence they share.
DOCS = [
    {"_id": "1", "title": "Dropout as augmentation",
     "text": "Methods. Dropout noise gives two views of one sentence. Shared sentence about contrastive learning."},
    {"_id": "2", "title": "Mixed negatives",
     "text": "Shared sentence about contrastive learning.\nHard negatives keep the gradient alive, e.g. in MixCSE."},
]
SENTENCES = ["Dropout as augmentation", "Dropout noise gives two views of one sentence.",
             "Shared sentence about contrastive learning.", "Mixed negatives",
             "Hard negatives keep the gradient alive, e.g. in MixCSE."]


def lines_of(path, **kwargs) -> list[str]:
    """A plain text file's training segments: every non-blank line."""
    return read_segments(path, segment="line", min_words=1, **kwargs)[0]


def write_jsonl(path, records, *, extra_lines=()):
    lines = [json.dumps(r) for r in records] + list(extra_lines)
    text = "\n".join(lines) + "\n"
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def write_csv(path, rows, fieldnames, delimiter=","):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fieldnames, delimiter=delimiter)
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_parquet(path, columns: dict):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), path)
    return path


# ---------------------------------------------------------------------------------------------- formats
@pytest.mark.parametrize("name", ["corpus.jsonl", "corpus.jsonl.gz"])
def test_beir_jsonl_defaults_sentences_title_first_dedupe_min_words(tmp_path, name):
    path = write_jsonl(tmp_path / name, DOCS)
    segments, stats = read_segments(path)
    # The two titles and "Methods." are under 4 words; the shared sentence is kept once.
    assert segments == [s for s in SENTENCES if len(s.split()) >= DOCUMENT_MIN_WORDS] == [
        SENTENCES[1], SENTENCES[2], SENTENCES[4]]
    assert stats == {"file": str(path), "format": "jsonl", "segment": "sentence", "min_words": 4, "dedupe": True,
                     "documents": 2, "segments": 3, "dropped_short": 3, "dropped_duplicates": 1}


def test_segment_modes_on_documents(tmp_path):
    path = write_jsonl(tmp_path / "corpus.jsonl", DOCS)
    passages, stats = read_segments(path, segment="passage")
    assert passages == [f"{d['title']} {d['text']}".replace("\n", " ") for d in DOCS]
    assert (stats["segment"], stats["documents"], stats["segments"]) == ("passage", 2, 2)
    lines, _ = read_segments(path, segment="line", min_words=1, dedupe=False)
    assert lines == ["Dropout as augmentation", DOCS[0]["text"], "Mixed negatives",
                     "Shared sentence about contrastive learning.",
                     "Hard negatives keep the gradient alive, e.g. in MixCSE."]
    everything, stats = read_segments(path, min_words=1, dedupe=False)
    assert everything == SENTENCES[:1] + ["Methods."] + SENTENCES[1:3] + SENTENCES[3:4] + SENTENCES[2:3] + \
        SENTENCES[4:]
    assert (stats["dropped_short"], stats["dropped_duplicates"]) == (0, 0)


def test_jsonl_named_column_ignores_title(tmp_path):
    records = [{"id": i, "title": "ignored title words here", "body": f"document number {i} has a body"}
               for i in range(3)]
    segments, stats = read_segments(write_jsonl(tmp_path / "docs.jsonl", records), text_column="body")
    assert segments == [f"document number {i} has a body" for i in range(3)] and stats["documents"] == 3


def test_csv_and_tsv_title_text_and_named_column(tmp_path):
    rows = [{"title": "A title of four", "text": "Quoted, multi-line\ntext in one field. It has two sentences.",
             "abstract": "only this column is read"}]
    path = write_csv(tmp_path / "docs.csv", rows, ["title", "text", "abstract"])
    assert read_segments(path)[0] == ["A title of four", "Quoted, multi-line text in one field.",
                                      "It has two sentences."]
    assert read_segments(path, text_column="abstract")[0] == ["only this column is read"]
    tsv = write_csv(tmp_path / "docs.tsv", rows, ["title", "text", "abstract"], delimiter="\t")
    assert read_segments(tsv, segment="passage")[0] == [
        "A title of four Quoted, multi-line text in one field. It has two sentences."]
    long = write_csv(tmp_path / "long.csv", [{"text": "word " * 40_000}], ["text"])  # 200 kB in one field
    assert read_segments(long, segment="passage")[0] == [" ".join(["word"] * 40_000)]
    bom = tmp_path / "excel.csv"
    bom.write_bytes("\ufefftext\nfrom a spreadsheet with a byte-order mark\n".encode())
    assert read_segments(bom)[0] == ["from a spreadsheet with a byte-order mark"]


def test_parquet_title_text_and_named_column(tmp_path):
    path = write_parquet(tmp_path / "docs.parquet", {
        "title": ["Parquet title with words", None], "text": ["First parquet sentence here. Second one is here.",
                                                            "A document without a title."],
        "body": ["the other column of text", "and its second row here"]})
    segments, stats = read_segments(path)
    assert segments == ["Parquet title with words", "First parquet sentence here.", "Second one is here.",
                        "A document without a title."]
    assert (stats["format"], stats["documents"]) == ("parquet", 2)
    assert read_segments(path, text_column="body", segment="passage")[0] == [
        "the other column of text", "and its second row here"]
    numbers = write_parquet(tmp_path / "numbers.parquet", {"text": ["a real sentence of text", None], "n": [1, 2]})
    assert read_segments(numbers)[0] == ["a real sentence of text"]
    with pytest.raises(DataError, match=rf"^{numbers}: row 1: column 'n' is not text \(int\)$"):
        read_segments(numbers, text_column="n")


def test_plain_text_is_read_exactly_as_before(tmp_path):
    text = "first line\n\n  Second  line, with spaces \nfirst line\nshort\n\tlast. Two sentences here.\n"
    path = tmp_path / "corpus.txt"
    path.write_text(text)
    expected = [line.strip() for line in text.splitlines() if line.strip()]  # every non-blank line, as it is
    segments, stats = read_segments(path)
    assert segments == expected == lines_of(path)
    assert stats == {"file": str(path), "format": "lines", "segment": "line", "min_words": 1, "dedupe": False,
                     "documents": 5, "segments": 5, "dropped_short": 0, "dropped_duplicates": 0}
    # opted in: dedupe, a minimum length, sentences
    assert read_segments(path, dedupe=True, min_words=2)[0] == expected[:2] + expected[4:]
    assert read_segments(path, segment="sentence")[0] == [  # sentences: whitespace runs collapsed
        "first line", "Second line, with spaces", "first line", "short", "last.", "Two sentences here."]


def test_max_sentences_counts_kept_segments(tmp_path):
    path = write_jsonl(tmp_path / "corpus.jsonl", DOCS)
    segments, stats = read_segments(path, max_sentences=2)
    assert segments == [SENTENCES[1], SENTENCES[2]] and stats["documents"] == 1
    assert read_segments(path, max_sentences=3)[0] == [SENTENCES[1], SENTENCES[2], SENTENCES[4]]


def test_dedupe_remembers_digests_not_strings():
    seen = _Seen()
    assert seen.add("a sentence") and not seen.add("a sentence") and seen.add("a sentence.")
    assert len(seen._digests) == 2 and all(isinstance(d, bytes) and len(d) == 16 for d in seen._digests)


def test_file_format_by_suffix():
    assert [file_format(p) for p in ("a.jsonl", "a.jsonl.gz", "a.csv", "a.tsv.gz", "a.parquet", "a.txt",
                                     "a.txt.gz", "corpus", "a.json")] == [
        "jsonl", "jsonl", "csv", "tsv", "parquet", "lines", "lines", "lines", "lines"]


# ------------------------------------------------------------------------------------------------ errors
def test_missing_column_names_it_and_the_columns_found(tmp_path):
    path = write_jsonl(tmp_path / "docs.jsonl", [{"_id": "1", "body": "x y z w"}])
    with pytest.raises(DataError, match=rf"^{path}:1: no column 'text' \(columns found: _id, body\); set text_column"):
        read_segments(path)
    with pytest.raises(DataError, match=rf"^{path}:1: no column 'abstract' \(columns found: _id, body\)"):
        read_segments(path, text_column="abstract")
    csv_path = write_csv(tmp_path / "docs.csv", [{"id": 1, "body": "x"}], ["id", "body"])
    with pytest.raises(DataError, match=rf"^{csv_path}: no column 'text' \(columns found: id, body\)"):
        read_segments(csv_path)
    parquet = write_parquet(tmp_path / "docs.parquet", {"id": [1], "body": ["x y z w"]})
    with pytest.raises(DataError, match=rf"^{parquet}: no column 'text' \(columns found: id, body\)"):
        read_segments(parquet)


def test_invalid_records_name_file_and_line(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", DOCS, extra_lines=["", '{"text": "unterminated'])
    with pytest.raises(DataError, match=rf"^{path}:4: invalid JSON \("):
        read_segments(path)
    path = write_jsonl(tmp_path / "list.jsonl", DOCS, extra_lines=['["text"]'])
    with pytest.raises(DataError, match=rf"^{path}:3: expected a JSON object, got list$"):
        read_segments(path)
    path = write_jsonl(tmp_path / "number.jsonl", [{"text": 42}])
    with pytest.raises(DataError, match=rf"^{path}:1: field 'text' is not text \(int\)$"):
        read_segments(path)
    path = tmp_path / "ragged.csv"
    path.write_text("text\nfine row of text\nbad,row\n")
    with pytest.raises(DataError, match=rf"^{path}:3: more fields than the header's 1$"):
        read_segments(path)


def test_unreadable_files(tmp_path):
    with pytest.raises(DataError, match=r"^training file not found: "):
        read_segments(tmp_path / "nope.jsonl")
    (tmp_path / "junk.parquet").write_bytes(b"not a parquet file at all")
    with pytest.raises(DataError, match=rf"^cannot read training file {tmp_path / 'junk.parquet'}: "):
        read_segments(tmp_path / "junk.parquet")
    damaged = tmp_path / "docs.jsonl.gz"
    damaged.write_bytes(gzip.compress(b'{"text": "a b c d"}\n' * 500)[:60])
    with pytest.raises(DataError, match=rf"^cannot read training file {damaged}: "):
        read_segments(damaged)
    with pytest.raises(DataError, match=r"text_column applies to \.jsonl, \.csv, \.tsv and \.parquet files"):
        read_segments(write_jsonl(tmp_path / "plain.txt", DOCS), text_column="text")


def test_nothing_left_after_filtering_says_why(tmp_path):
    path = write_jsonl(tmp_path / "short.jsonl", [{"text": "Too short."}, {"text": "Too short."}, {"text": ""}])
    with pytest.raises(DataError, match=rf"^training file has no segments left after filtering: {path} \(3 "
                                        r"documents; 2 segments shorter than 4 words, 0 duplicates\)$"):
        read_segments(path)
    empty = write_jsonl(tmp_path / "empty.jsonl", [])
    with pytest.raises(DataError, match=rf"^training file has no sentences: {empty}$"):
        read_segments(empty)


# ---------------------------------------------------------------------------------------------- splitter
@pytest.mark.parametrize("text, sentences", [
    ("Cells were treated, e.g. with aspirin, i.e. a salicylate. It worked.",
     ["Cells were treated, e.g. with aspirin, i.e. a salicylate.", "It worked."]),
    ("As shown by Smith et al. in 2010, the result holds. We confirm it.",
     ["As shown by Smith et al. in 2010, the result holds.", "We confirm it."]),
    ("See Fig. 2 for details. The curve rises.", ["See Fig. 2 for details.", "The curve rises."]),
    ("The difference was significant (p < 0.05). Controls were stable.",
     ["The difference was significant (p < 0.05).", "Controls were stable."]),
    ("The mean was 3.5 mg/kg vs. 1.25 before. Values ranged from 0.1 to 2.7.",
     ["The mean was 3.5 mg/kg vs. 1.25 before.", "Values ranged from 0.1 to 2.7."]),
    ("In contrast, H2A.Z deposition is dispensable. It works.",  # no boundary inside a token
     ["In contrast, H2A.Z deposition is dispensable.", "It works."]),
    ("A heading\n\nThe paragraph after a blank line. Its second  sentence.",
     ["A heading", "The paragraph after a blank line.", "Its second sentence."]),
    ("No final stop", ["No final stop"]),
    ("  \n ", []),
])
def test_split_sentences_tricky_cases(text, sentences):
    assert split_sentences(text) == sentences


# ------------------------------------------------------------------------------------- config and stats
def test_config_keys_defaults_and_validation(tmp_path):
    base = {"model": "m", "train_file": "f", "output_dir": "o"}
    cfg = build_config(base)
    assert (cfg.text_column, cfg.segment, cfg.min_words, cfg.dedupe) == (None, None, None, None)
    cfg = build_config(base | {"text_column": "body", "segment": "passage", "min_words": 2, "dedupe": False})
    assert (cfg.text_column, cfg.segment, cfg.min_words, cfg.dedupe) == ("body", "passage", 2, False)
    with pytest.raises(ConfigError, match="segment must be one of line, sentence, passage, got 'paragraph'"):
        build_config(base | {"segment": "paragraph"})
    with pytest.raises(ConfigError, match="'min_words' must be >= 1, got 0"):
        build_config(base | {"min_words": 0})
    with pytest.raises(ConfigError, match="text_column must name a column"):
        build_config(base | {"text_column": " "})
    path = write_jsonl(tmp_path / "corpus.jsonl", DOCS)
    cfg = build_config({"model": "m", "train_file": str(path), "output_dir": "o", "segment": "passage",
                        "max_sentences": 1})
    assert read_training_text(cfg) == read_segments(path, segment="passage", max_sentences=1)


def test_tokenised_corpus_stats_and_corpus_interface(tiny_bert):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    sentences = ["t0w1 t0w2 t0w3", "t0w1 t0w2 t0w3 t0w4", "t0w1 t0w2 t0w3 t0w4 t0w5", "t1w1 t1w2 t1w3 t1w4 t1w5"]
    corpus = TokenizedCorpus(sentences, tokenizer, 6)  # [CLS] + words + [SEP]: 5, 6 (exactly 6: not cut), 7, 7
    assert isinstance(corpus, Corpus) and len(corpus) == 4
    assert corpus.stats == {"sequences": 4, "tokens": 5 + 6 + 6 + 6, "truncated": 2, "truncated_share": 0.5,
                            "max_seq_length": 6}
    used = TokenizedCorpus(sentences, tokenizer, 6, indices=np.array([0, 3]))
    assert len(used) == 4 and used.stats["sequences"] == 2 and used.stats["truncated"] == 1
    assert used.batch(np.array([3, 0]))["attention_mask"].sum().item() == 6 + 5


def test_describe_line():
    stats = {"file": "corpus.jsonl", "format": "jsonl", "segment": "sentence", "min_words": 4, "dedupe": True,
             "documents": 5183, "segments": 49496, "dropped_short": 286, "dropped_duplicates": 34}
    line = describe(stats, {"sequences": 4000, "tokens": 112345, "truncated": 2080, "truncated_share": 0.52,
                            "max_seq_length": 32})
    assert line == ("text: corpus.jsonl (jsonl): 5,183 documents -> 49,496 segments (sentence; dropped 286 shorter "
                    "than 4 words, 34 duplicates); tokenised the 4,000 this run uses: 112,345 tokens, 52.0% "
                    "truncated at max_seq_length 32")
    plain = stats | {"format": "lines", "segment": "line", "min_words": 1, "dedupe": False}
    assert describe(plain) == "text: corpus.jsonl (lines): 5,183 documents -> 49,496 segments (line)"


# --------------------------------------------------------------------------------------------- training
def test_train_on_documents_prints_what_it_read(tiny_bert, tmp_path, capsys):
    rng = np.random.default_rng(0)
    words = [f"t{t}w{w}" for t in range(8) for w in range(12)]
    records = [{"_id": str(i), "title": "", "text": " ".join(
        " ".join(rng.choice(words, 6)) + "." for _ in range(3))} for i in range(12)]
    path = write_jsonl(tmp_path / "corpus.jsonl", records)
    out = tmp_path / "run"
    from mixcse.training.trainer import train

    cfg = build_config({"model": str(tiny_bert), "train_file": str(path), "output_dir": str(out), "batch_size": 8,
                        "max_steps": 2, "max_seq_length": 6, "eval_steps": 2, "log_steps": 1})
    train(cfg)
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("text: ")]
    assert printed == [f"text: {path} (jsonl): 12 documents -> 36 segments (sentence; dropped 0 shorter than 4 "
                       f"words, 0 duplicates); tokenised the 16 this run uses: 96 tokens, 100.0% truncated at "
                       f"max_seq_length 6"]


@pytest.mark.parametrize("bad", ["invalid_json", "truncated_gzip"])
def test_train_refuses_a_bad_file_before_writing(tmp_path, capsys, bad):
    if bad == "invalid_json":
        path = write_jsonl(tmp_path / "bad.jsonl", DOCS, extra_lines=["{not json"])
        expected = f"error: {path}:3: invalid JSON ("
    else:
        path = tmp_path / "corpus.txt.gz"
        path.write_bytes(gzip.compress(b"a training sentence\n" * 1000)[:40])
        expected = f"error: cannot read training file {path}: "
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"model: no-model-needed\ntrain_file: {path}\noutput_dir: {tmp_path / 'run'}\n")
    code = main(["train", str(recipe)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(expected) and len(err.splitlines()) == 1
    assert not (tmp_path / "run").exists()
