"""`mixcse data download` against a local HTTP server on 127.0.0.1 (no real network)."""
import functools
import hashlib
import http.server
import io
import tarfile
import threading
from pathlib import Path

import pytest

from mixcse import cli
from mixcse.evaluation import DataError
from mixcse.data.download import SENTEVAL_FILES, download

FILES = {
    "STS/STSBenchmark/sts-test.csv": b"g\tx\t2012\t1\t4.5\ta b\tc d\n",
    "MR/rt-polarity.pos": b"a fine film . \n",
    "MR/README": b"not checked, still installed\n",
}
WIKI = b"first sentence .\nsecond sentence .\n"


def checksum(data: bytes):
    return len(data), hashlib.sha256(data).hexdigest()


CHECKS = {k: checksum(v) for k, v in FILES.items() if k != "MR/README"}


def make_tar(prefix: str, extra: dict | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in {**FILES, **(extra or {})}.items():
            info = tarfile.TarInfo(prefix + name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class Server:
    def __init__(self, root: Path):
        self.requests = []
        outer = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                outer.requests.append(self.path)

        handler = functools.partial(Handler, directory=str(root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture
def served(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    (root / "senteval.tar").write_bytes(make_tar("", {"../evil.txt": b"x"}))
    (root / "wiki1m_for_simcse.txt").write_bytes(WIKI)
    server = Server(root)
    yield root, server
    server.close()


def listing(path: Path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


def test_download_verifies_and_lays_out(served, tmp_path):
    root, server = served
    dest = tmp_path / "data"
    rep = download(dest, base_url=server.url, senteval_checksums=CHECKS, wiki1m_checksum=checksum(WIKI),
                   log=lambda m: None)
    assert rep["senteval"]["status"] == "installed" and rep["wiki1m"]["status"] == "installed"
    assert listing(dest) == sorted(["downstream/" + k for k in FILES] + ["wiki1m_for_simcse.txt"])
    assert (dest / "downstream" / "MR" / "rt-polarity.pos").read_bytes() == FILES["MR/rt-polarity.pos"]
    assert (dest / "wiki1m_for_simcse.txt").read_bytes() == WIKI
    assert not (tmp_path / "evil.txt").exists()  # path traversal in the archive is ignored
    n = len(server.requests)
    rep = download(dest, base_url=server.url, senteval_checksums=CHECKS, wiki1m_checksum=checksum(WIKI),
                   log=lambda m: None)
    assert rep["senteval"]["status"] == "present" and rep["wiki1m"]["status"] == "present"
    assert len(server.requests) == n  # verified files are not fetched again


@pytest.mark.parametrize("prefix", ["downstream/", "data/downstream/", "senteval/"])
def test_archive_prefixes(served, tmp_path, prefix):
    root, server = served
    (root / "senteval.tar").write_bytes(make_tar(prefix))
    dest = tmp_path / "d"
    download(dest, what=["senteval"], base_url=server.url, senteval_checksums=CHECKS, log=lambda m: None)
    assert (dest / "downstream" / "STS" / "STSBenchmark" / "sts-test.csv").is_file()


def test_bad_checksum_installs_nothing(served, tmp_path):
    _, server = served
    dest = tmp_path / "data"
    wrong = dict(CHECKS, **{"MR/rt-polarity.pos": (15, "0" * 64)})
    with pytest.raises(DataError, match=r"MR/rt-polarity\.pos in the archive does not verify"):
        download(dest, what=["senteval"], base_url=server.url, senteval_checksums=wrong, log=lambda m: None)
    with pytest.raises(DataError, match="downloaded file does not verify"):
        download(dest, what=["wiki1m"], base_url=server.url, wiki1m_checksum=(1, "0" * 64), log=lambda m: None)
    assert listing(dest) == []  # no partial files, no temp leftovers


def test_existing_mismatching_file_is_never_overwritten(served, tmp_path):
    _, server = served
    dest = tmp_path / "data"
    mine = dest / "downstream" / "MR" / "rt-polarity.pos"
    mine.parent.mkdir(parents=True)
    mine.write_bytes(b"my own edits\n")
    with pytest.raises(DataError, match=r"rt-polarity\.pos: existing file does not match"):
        download(dest, what=["senteval"], base_url=server.url, senteval_checksums=CHECKS, log=lambda m: None)
    assert mine.read_bytes() == b"my own edits\n"


def test_missing_file_and_unreachable_server(served, tmp_path):
    _, server = served
    with pytest.raises(DataError, match="archive lacks 1 expected file"):
        download(tmp_path / "a", what=["senteval"], base_url=server.url,
                 senteval_checksums=dict(CHECKS, **{"TREC/TREC_10.label": (1, "0" * 64)}), log=lambda m: None)
    with pytest.raises(DataError, match="download failed"):
        download(tmp_path / "b", what=["wiki1m"], base_url=server.url + "nowhere/", log=lambda m: None)


def test_cli_data_download_error_line(served, tmp_path, capsys, monkeypatch):
    _, server = served
    monkeypatch.setenv("MIXCSE_DATA_URL", server.url)
    # the real checksum table does not match the tiny archive: one error line, non-zero exit
    rc = cli.main(["data", "download", "--dest", str(tmp_path / "x"), "--what", "senteval"])
    assert rc != 0 and capsys.readouterr().err.strip().splitlines()[-1].startswith("error: ")
    rc = cli.main(["data", "download", "--dest", str(tmp_path / "x"), "--what", "wiki1m"])
    assert rc == 0 and (tmp_path / "x" / "wiki1m_for_simcse.txt").read_bytes() == WIKI


def test_builtin_table_covers_the_evaluator():
    assert len(SENTEVAL_FILES) == 66
    assert all(len(sha) == 64 and size > 0 for size, sha in SENTEVAL_FILES.values())
