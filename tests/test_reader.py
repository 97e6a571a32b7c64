"""mixcse/data/reader.py: the one reader of text files (strict UTF-8, NUL bytes, corrupt gzip), and its callers."""

from __future__ import annotations

import gzip

import pytest

from mixcse.cli import main
from mixcse.cli.options import read_lines
from mixcse.data.documents import read_segments
from mixcse.data.reader import iter_lines, read_nonblank
from mixcse.errors import DataError

TEXT = "  first line \n\nsecond\t\n   \nthird\n"


def lines_of(path, **kwargs) -> list[str]:
    """A plain text file's training segments: every non-blank line."""
    return read_segments(path, segment="line", min_words=1, **kwargs)[0]


def write_gz(path, data: bytes):
    with gzip.open(path, "wb") as fh:
        fh.write(data)
    return path


@pytest.mark.parametrize("name", ["a.txt", "a.txt.gz"])
def test_lines_numbered_and_stripped_blank_lines_kept(tmp_path, name):
    path = tmp_path / name
    write_gz(path, TEXT.encode()) if name.endswith(".gz") else path.write_text(TEXT)
    assert list(iter_lines(path)) == [(1, "first line"), (2, ""), (3, "second"), (4, ""), (5, "third")]
    assert [line for _, line in iter_lines(path, strip=False)][:2] == ["  first line \n", "\n"]
    assert read_nonblank(path) == (["first line", "second", "third"], 2)


def test_missing_file_names_what_it_is(tmp_path):
    with pytest.raises(DataError, match=r"^corpus file not found: .*nope\.txt$"):
        list(iter_lines(tmp_path / "nope.txt", what="corpus"))


@pytest.mark.parametrize("gz", [False, True])
def test_nul_byte_and_non_utf8_fail_at_their_line(tmp_path, gz):
    def write(name, data: bytes):
        path = tmp_path / (name + (".gz" if gz else ""))
        write_gz(path, data) if gz else path.write_bytes(data)
        return path

    path = write("nul.txt", b"ok\nfine\nab\x00c\n")
    with pytest.raises(DataError, match=rf"^{path}:3: not a text file \(NUL byte\)$"):
        list(iter_lines(path))
    # UTF-16 text is full of NUL bytes: it is reported as such, on the raw bytes, before any decoding
    path = write("utf16.txt", "hello\n".encode("utf-16"))
    with pytest.raises(DataError, match=rf"^{path}:1: not a text file"):
        list(iter_lines(path))
    path = write("latin1.txt", "ok\ncafé\n".encode("latin-1"))
    with pytest.raises(DataError, match=rf"^{path}:2: not UTF-8 text$"):
        list(iter_lines(path))


def corrupt_gzips(tmp_path):
    good = gzip.compress(("a sentence of the corpus\n" * 2000).encode())
    fake = tmp_path / "fake.txt.gz"
    fake.write_bytes(b"plain text, not gzip\n")  # gzip.BadGzipFile
    truncated = tmp_path / "truncated.txt.gz"
    truncated.write_bytes(good[: len(good) // 2])  # EOFError
    damaged = tmp_path / "damaged.txt.gz"
    middle = len(good) // 2
    damaged.write_bytes(good[:20] + bytes(b ^ 0xFF for b in good[20:middle]) + good[middle:])  # zlib.error
    return [fake, truncated, damaged]


def test_corrupt_or_truncated_gzip_is_a_data_error(tmp_path):
    for path in corrupt_gzips(tmp_path):
        with pytest.raises(DataError, match=rf"^cannot read training file {path}: "):
            list(iter_lines(path, what="training"))


def test_training_reader_keeps_its_messages(tmp_path):
    for path in corrupt_gzips(tmp_path):
        with pytest.raises(DataError, match="cannot read"):
            lines_of(path)
    (tmp_path / "blank.txt").write_text("\n  \n")
    with pytest.raises(DataError, match=r"^training file has no sentences: "):
        lines_of(tmp_path / "blank.txt")


def test_encode_input_errors_are_data_errors(tmp_path):
    (tmp_path / "nul.txt").write_text("fine\nbad\0line\n")
    with pytest.raises(DataError, match=r"nul\.txt:2: not a text file \(NUL byte\)"):
        read_lines(tmp_path / "nul.txt")


def test_encode_with_a_corrupt_gzip_exits_2_and_writes_nothing(tmp_path, capsys):
    for path in corrupt_gzips(tmp_path):
        output = tmp_path / "emb.npy"
        code = main(["encode", str(tmp_path / "no-model-needed"), "--input", str(path), "--output", str(output)])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith(f"error: cannot read input file {path}: ") and len(err.splitlines()) == 1
        assert not output.exists()
