"""Atomic writes (mixcse/utils/files.py) leave files with the normal mode; a failed write leaves nothing behind."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest

from mixcse.utils.files import atomic_path, atomic_write_json, atomic_write_text, normal_file_mode, unwritable_reason


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture()
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_normal_mode_follows_the_umask(umask_022, tmp_path):
    assert normal_file_mode() == 0o644
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    atomic_write_text(tmp_path / "atomic.txt", "x")
    assert _mode(tmp_path / "atomic.txt") == _mode(plain) == 0o644


def test_replacing_a_file_keeps_the_normal_mode(umask_022, tmp_path):
    target = tmp_path / "record.json"
    atomic_write_json(target, {"a": 1})
    atomic_write_json(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 2} and _mode(target) == 0o644
    with pytest.raises(ValueError):  # NaN is refused, the old file stays
        atomic_write_json(target, {"a": float("nan")})
    assert json.loads(target.read_text()) == {"a": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def test_failed_write_leaves_no_temp_file(tmp_path):
    with pytest.raises(RuntimeError):
        with atomic_path(tmp_path / "out.bin") as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []


def test_unwritable_reason(tmp_path):
    (tmp_path / "file").write_text("x")
    assert unwritable_reason(tmp_path / "new" / "deeper.txt") is None
    assert "is a folder" in unwritable_reason(tmp_path)
    assert "is a file, not a folder" in unwritable_reason(tmp_path / "file" / "x.npy")


def test_saved_embeddings_have_the_normal_mode(umask_022, tmp_path):
    from mixcse.cli.encode import save_embeddings

    for name in ("e.npy", "e.safetensors"):
        save_embeddings(tmp_path / name, np.zeros((2, 3), dtype=np.float32))
        assert _mode(tmp_path / name) == 0o644


def test_the_data_reaches_the_disk_before_the_name_replaces_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "state.txt"
    target.write_text("old")
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
                        or real_fsync(fd))
    monkeypatch.setattr(os, "replace", lambda a, b: events.append(("replace", str(b))) or real_replace(a, b))
    atomic_write_text(target, "new")
    assert target.read_text() == "new"
    kinds = [kind for kind, _ in events]
    assert kinds == ["fsync", "replace", "fsync"]
    assert events[0][1].startswith(str(tmp_path / ".state.txt.")) and events[2][1] == str(tmp_path)
