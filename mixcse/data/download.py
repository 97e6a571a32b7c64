"""`mixcse data download`: fetch SentEval's benchmark files and wiki1m_for_simcse.txt, verified.

The sources are the SimCSE authors' public copies (`senteval.tar`, `wiki1m_for_simcse.txt`). Every file the
evaluator reads is checked against the size and SHA-256 of the copy the published numbers were computed on, so a
changed mirror is caught instead of silently moving the scores. Writes are atomic (temp file, verify, rename), an
existing file that verifies is never touched, and one that does not verify is never overwritten.
"""
from __future__ import annotations

import os
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable

from mixcse.errors import DataError
from mixcse.utils.files import cache_home, file_digest, normal_file_mode

DEFAULT_BASE_URL = "https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/"
BASE_URL_ENV = "MIXCSE_DATA_URL"
SENTEVAL_ARCHIVE = "senteval.tar"
WIKI1M = "wiki1m_for_simcse.txt"
ITEMS = ("senteval", "wiki1m")

# (bytes, sha256) of each file the evaluator reads, relative to downstream/ (SentEval/SimCSE data uploads).
SENTEVAL_FILES: dict[str, tuple[int, str]] = {
    "CR/custrev.neg": (142650, "ec94532766f6f962094841ab3bee2ad6f232f996c3756825a91e78bcc294750f"),
    "CR/custrev.pos": (228014, "91a20a4ffeb5d38a39a4087bb247e16538aff21e7d621ae59738379f39f21732"),
    "MPQA/mpqa.neg": (158902, "8da6e035fa4cea02f0555091096b29a6b3995ff0adf41fad25008dcee066b79e"),
    "MPQA/mpqa.pos": (60581, "7487dbb74c77383e60b292845495163a9e21fb70a4fdacdda933413e43163f0d"),
    "MR/rt-polarity.neg": (616109, "c4ac36eaa8adc8ee31c31f69594bfbe68d83ef5b6db53f1f19b28c0be52f3999"),
    "MR/rt-polarity.pos": (629795, "34e5b0da2d491e46b700b00afe735aaae0962bcfe4f7f22b2d8077e714fa370f"),
    "MRPC/msr_paraphrase_test.txt": (441275, "a04e271090879aaba6423d65b94950c089298587d9c084bf9cd7439bd785f784"),
    "MRPC/msr_paraphrase_train.txt": (1047044, "60a9b09084528f0673eedee2b69cb941920f0b8cd0eeccefc464a98768457f89"),
    "SICK/SICK_test_annotated.txt": (560514, "d0362afe8304c8d08166b82d76da2a8c665d5b635ac1f3f1ee82054511749f97"),
    "SST/binary/sentiment-dev": (94916, "9a6c7403b71a9b762158387afe4431253ae10cdfb2319b5275289f3766f48291"),
    "SST/binary/sentiment-test": (194788, "4fefd1cd67526cf87ebc7fafc3afc21cc7cfa6ae53b45e74f77f9456e3c62752"),
    "SST/binary/sentiment-train": (3806066, "10a92a297ec38e262386e5a2713b4bc70e5d18ced88b7f54bd171a26e5b34ab5"),
    "STS/STS12-en-test/STS.gs.MSRpar.txt": (4500, "5526be59228bc34ccb3cb6f1f56c0d7278d3419b8886713ae016fd92b151f19c"),
    "STS/STS12-en-test/STS.gs.MSRvid.txt": (4500, "9c6096c6bcfb0144c8bbddb00900ca9198c88498630cd0c8f08d18365f1d7150"),
    "STS/STS12-en-test/STS.gs.SMTeuroparl.txt": (2754, "708530c4d006d06881f3289fce35d624d7efe562dcf0fe5f8aa0eec3a135f6d4"),
    "STS/STS12-en-test/STS.gs.surprise.OnWN.txt": (4500, "088d8ca22c0aa406e4a5d2e6e308a4f38b482b8e736c2445a38ffb6e4c4fb4fd"),
    "STS/STS12-en-test/STS.gs.surprise.SMTnews.txt": (2394, "aa6dfc868db333c43dc59be14d46fa6587c7ebddc0d497e717f647bf35121cf1"),
    "STS/STS12-en-test/STS.input.MSRpar.txt": (168149, "21c0c6cc32f68f69d672dfae0f86935cdc2627bae4941381692941aa9320f8c4"),
    "STS/STS12-en-test/STS.input.MSRvid.txt": (50402, "c4a92a3645744f77d1cda9f2af7da5d11e807ae296f6a20fe5930403fb9c4dfe"),
    "STS/STS12-en-test/STS.input.SMTeuroparl.txt": (61015, "05acf33c0fcb592347f49e279137a17e0244d7b0d37cc113134320a5d3f586e1"),
    "STS/STS12-en-test/STS.input.surprise.OnWN.txt": (68924, "e605c67de4b7cee2c5629239d209e2845920f475ebd0468bdcf03d8da2ffa9cf"),
    "STS/STS12-en-test/STS.input.surprise.SMTnews.txt": (59937, "cc4a0b9a1355c5680a8a37c02f2d08e35f95754b9f89a2a4a05088ee5ff57ffe"),
    "STS/STS13-en-test/STS.gs.FNWN.txt": (685, "8ca95b7228119578e2007839cf7969f22c4f1fd41fd610c4b7f9683072d98066"),
    "STS/STS13-en-test/STS.gs.OnWN.txt": (2001, "0cd497aaddb00a2fb6db25f77bccfc09e8aa012e11549b81b434bab1a27ad954"),
    "STS/STS13-en-test/STS.gs.headlines.txt": (2716, "f49f64089011436dd296ef384c07160219406feef7dc4b9fa2af52a519f32bc6"),
    "STS/STS13-en-test/STS.input.FNWN.txt": (46833, "a20cb41a33a528f3c089c94ef24da8eb5e26ed594937cf6fa90f3d1c79d6c53c"),
    "STS/STS13-en-test/STS.input.OnWN.txt": (48351, "cb74993eef23cfa2c03da7e5a08c62e50c9baafae0fa9ba0bb5a09d8e7d2be65"),
    "STS/STS13-en-test/STS.input.headlines.txt": (69813, "637f3b4afdc8d1cc789e91a4d7217efff30e503c34a872d93e8b27e7b1136cb7"),
    "STS/STS14-en-test/STS.gs.OnWN.txt": (2765, "1c80147df270ea4cfce14a47ed29f8a2f10d5dc016d02836077fd786ff7f535b"),
    "STS/STS14-en-test/STS.gs.deft-forum.txt": (1780, "ba6dc76696b5c93985590a325b4d142449932cdf0d715b2bab1b1743fe3c488c"),
    "STS/STS14-en-test/STS.gs.deft-news.txt": (1058, "105c5b333abd50c274efb4dae9e3e0dab36ed63eee780cfb49955b1586bd62f2"),
    "STS/STS14-en-test/STS.gs.headlines.txt": (2610, "f243c34647255cd0b994565ed4f58dd31506e7d9c9d6250d1a6dd14095625832"),
    "STS/STS14-en-test/STS.gs.images.txt": (2550, "fc994ebacc7074c332626fa9e29542d7340a48a3cdb999b47cdb59c378523a62"),
    "STS/STS14-en-test/STS.gs.tweet-news.txt": (2640, "0098c644bfeaa2d511a8297b1940771865900c372c9dd49a62726dc5ec02c9a3"),
    "STS/STS14-en-test/STS.input.OnWN.txt": (69761, "8cd2333328d17e3212afa2d43dd934c5521e3fd35fc786b992dc7864f9d34f8f"),
    "STS/STS14-en-test/STS.input.deft-forum.txt": (43750, "b39579e59c7b9f4063545c3d4643f8db16dc060cd0a35447ef56ff0aabec9d83"),
    "STS/STS14-en-test/STS.input.deft-news.txt": (63248, "cc450dcd9228211c1a311de1ff28199f166dce6f7fc81dcb5ce968a3a8a80d2d"),
    "STS/STS14-en-test/STS.input.headlines.txt": (72107, "2ed0ea55d196cdbb440ed428eb1846dcb43486a692aafb22b3bc5c14c44407c8"),
    "STS/STS14-en-test/STS.input.images.txt": (71048, "295fc99f8a9215c330b36a08bc1ff3e428f10057be5bb915262111494b3616e2"),
    "STS/STS14-en-test/STS.input.tweet-news.txt": (94941, "b25b3768762aa7cdcd89f2a25ce5049de7e4cd51b138227c3a31092ae8e2b5f5"),
    "STS/STS15-en-test/STS.gs.answers-forums.txt": (3500, "1644301a7540e5484da285002e9269062852efb2272be614cad99c9530f6a102"),
    "STS/STS15-en-test/STS.gs.answers-students.txt": (4500, "028db213140f8c7aef7497c4ae38b6380938f20359852231669c83dce11c3701"),
    "STS/STS15-en-test/STS.gs.belief.txt": (3500, "5736192faaccbdbecd0ef6b73ec04b24115cd2e48d55dc3b1b170da3d2a81c75"),
    "STS/STS15-en-test/STS.gs.headlines.txt": (4500, "e8e432f769c8a94ddb62ae3343890ac24a9dd78a116d56c707313bc59413dd56"),
    "STS/STS15-en-test/STS.gs.images.txt": (4500, "ed8878209098c77ca7f02ac413d3fd698f92ad3425999555e50fda89fc46012a"),
    "STS/STS15-en-test/STS.input.answers-forums.txt": (357930, "b8f1bc125559adbb3ac5b33206472b217c12621c3a6b5a8575da47dc0b536fc4"),
    "STS/STS15-en-test/STS.input.answers-students.txt": (162805, "4893f736e84cea176c39c882250f6513d5bbcfa6ebe8d3ffabcef6056d0471a7"),
    "STS/STS15-en-test/STS.input.belief.txt": (289003, "a54ec7af1924c900d8474586abae465819d2c03c73561aa2e76e7fa5e836faff"),
    "STS/STS15-en-test/STS.input.headlines.txt": (146911, "85d90b0f8f258a47758808d382188ba2ee7b1adbbf84feb776afad0e4691d5d1"),
    "STS/STS15-en-test/STS.input.images.txt": (146961, "0dac9494186838a8f4dfbb4ee290fec8d7581cf84a33d615c522700b3b50e0d6"),
    "STS/STS16-en-test/STS.gs.answer-answer.txt": (1826, "332efd741b0cb247d20dd2a6cec854360c921c7e6b395f328f562d8d26057214"),
    "STS/STS16-en-test/STS.gs.headlines.txt": (1747, "01e33a95996201a6e81e3cce9eda0f15048b77613ea64dce2929bb35479f7d85"),
    "STS/STS16-en-test/STS.gs.plagiarism.txt": (1501, "29984944a91aaff484f2b2e5d4d434fc8a6f5ef6f578a880cccd2786f5142fdc"),
    "STS/STS16-en-test/STS.gs.postediting.txt": (3531, "81947ed9dbe7f85b7bd249df68ed5c7b2f16f06390ad568eb5554b1e26bc5577"),
    "STS/STS16-en-test/STS.gs.question-question.txt": (1764, "cf9ebf9d140191f73620cda0560947ad9283c910735d0d541b8a401a5e64afb0"),
    "STS/STS16-en-test/STS.input.answer-answer.txt": (151640, "ebbffced7d4630755e61d4dfe4d82121198965a14b9f5734b5abedb961f0725c"),
    "STS/STS16-en-test/STS.input.headlines.txt": (149506, "705c3e82fb85fa3b6706a481b790e1030304ddc9c72d39e126693ed44b258ba6"),
    "STS/STS16-en-test/STS.input.plagiarism.txt": (206994, "dd4ca54d1dfcd7d1cabe67f0de98cde23f4c1696ecc0003afbecae1274305d63"),
    "STS/STS16-en-test/STS.input.postediting.txt": (808635, "9b455d8da1d1bae692d038da1d431827d23bfec04c64b109efc3b6b620fd422f"),
    "STS/STS16-en-test/STS.input.question-question.txt": (167903, "58920c7da7dbc1b860609310782d88b7457d599c90a226819b5880262dd7f58a"),
    "STS/STSBenchmark/sts-dev.csv": (258473, "c558fa95fec006608f13e3d942f153b614beabccbf33e64f36418d406a895e37"),
    "STS/STSBenchmark/sts-test.csv": (206733, "22ef3e10603b6655d7c7978c8eee26e7d5291dd5a71c5531b934fb025c108cbf"),
    "SUBJ/subj.objective": (672430, "d8ccd43f1674f1c17e4ab717564e3561cfb719b0db4cfb19e5677427c68ff8a1"),
    "SUBJ/subj.subjective": (634654, "274c2ffe59c204dc4df779848561786f59a98cc20dda3cfdd7d9f76a4f730710"),
    "TREC/TREC_10.label": (23269, "86ad53c8fc9d397ab2f4be7c967d8efb470b260140557d3e57afad69d1b88b76"),
    "TREC/train_5500.label": (333379, "8bd6e79493f43bbd22c364587366a1dced54e1e31259eaa92721a0f526031116"),
}
# No published checksum is known for wiki1m_for_simcse.txt; its SHA-256 is printed so that users can pin it.
WIKI1M_CHECKSUM: tuple[int, str] | None = None

_CHUNK = 1 << 20


def _sha256(path: Path) -> tuple[int, str]:
    return path.stat().st_size, file_digest(path)


def _verify(path: Path, expected: tuple[int, str] | None) -> str | None:
    """None if `path` matches (or nothing is expected), else a reason."""
    if expected is None:
        return None
    size, digest = _sha256(path)
    if size != expected[0]:
        return f"size {size} bytes, expected {expected[0]}"
    if digest != expected[1]:
        return f"sha256 {digest}, expected {expected[1]}"
    return None


def _fetch(url: str, dest_dir: Path, log: Callable[[str], None], timeout: float = 60.0) -> Path:
    """Stream `url` into a temp file inside `dest_dir` (same file system, so the final rename is atomic)."""
    fd, tmp = tempfile.mkstemp(prefix=".download-", suffix=".part", dir=dest_dir)
    try:
        req = urllib.request.Request(url, headers={"User-Agent": "mixcse-data-download"})
        with urllib.request.urlopen(req, timeout=timeout) as resp, os.fdopen(fd, "wb") as out:
            total = int(resp.headers.get("Content-Length") or 0)
            done, next_report = 0, 50 << 20
            for chunk in iter(lambda: resp.read(_CHUNK), b""):
                out.write(chunk)
                done += len(chunk)
                if done >= next_report:
                    log(f"  {done >> 20} MiB" + (f" of {total >> 20} MiB" if total else ""))
                    next_report += 50 << 20
        os.chmod(tmp, normal_file_mode())  # mkstemp's 0600 would stick to the data file after the rename
        return Path(tmp)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise DataError(f"{url}: download failed: {exc}") from None
        raise


def _url(base: str, name: str) -> str:
    return base if base.endswith(name) else base.rstrip("/") + "/" + name


def _member_path(name: str) -> PurePosixPath | None:
    """Relative path of a tar member under downstream/, or None if it must not be extracted."""
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts:
        return None
    parts = [x for x in p.parts if x not in ("", ".")]
    if "downstream" in parts:  # archives packed as data/downstream/... or downstream/...
        parts = parts[parts.index("downstream") + 1:]
    return PurePosixPath(*parts) if parts else None


def _strip_single_root(paths: list[PurePosixPath], known_roots: set[str]) -> list[PurePosixPath]:
    """An archive packed as senteval/STS/... has one extra top folder: drop it."""
    roots = {p.parts[0] for p in paths if len(p.parts) > 1}
    if len(roots) == 1 and not (roots & known_roots):
        return [PurePosixPath(*p.parts[1:]) if len(p.parts) > 1 else p for p in paths]
    return paths


def install_senteval(dest: Path, base_url: str, checksums: dict[str, tuple[int, str]],
                     log: Callable[[str], None]) -> dict:
    target = dest / "downstream"
    present_ok = [rel for rel in checksums if (target / rel).is_file()]
    bad = [(rel, why) for rel in present_ok if (why := _verify(target / rel, checksums[rel]))]
    if bad:
        rel, why = bad[0]
        raise DataError(f"{target / rel}: existing file does not match the expected checksum ({why}); "
                        f"not overwriting it -- move it away and run again")
    if len(present_ok) == len(checksums) and checksums:
        log(f"SentEval data: all {len(checksums)} files already present and verified in {target}")
        return {"status": "present", "files": len(checksums), "path": str(target)}

    url = _url(base_url, SENTEVAL_ARCHIVE)
    log(f"SentEval data: downloading {url}")
    archive = _fetch(url, dest, log)
    staging = Path(tempfile.mkdtemp(prefix=".senteval-", dir=dest))
    try:
        try:
            tf = tarfile.open(archive)
        except tarfile.TarError as exc:
            raise DataError(f"{url}: not a tar archive ({exc})") from None
        with tf:
            members = [m for m in tf.getmembers() if m.isfile()]
            rels = [_member_path(m.name) for m in members]
            keep = [(m, r) for m, r in zip(members, rels) if r is not None]
            known = {rel.split("/")[0] for rel in checksums} | {"STS", "SICK", "MR", "CR", "SUBJ", "MPQA", "SST",
                                                                "TREC", "MRPC"}
            stripped = _strip_single_root([r for _, r in keep], known)
            for (m, _), rel in zip(keep, stripped):
                out = staging / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                src = tf.extractfile(m)
                if src is None:
                    continue
                with src, open(out, "wb") as fh:
                    shutil.copyfileobj(src, fh, _CHUNK)
        missing = [rel for rel in checksums if not (staging / rel).is_file()]
        if missing:
            raise DataError(f"{url}: archive lacks {len(missing)} expected file(s), e.g. {missing[0]}")
        for rel, exp in checksums.items():
            why = _verify(staging / rel, exp)
            if why:
                raise DataError(f"{url}: {rel} in the archive does not verify ({why})")
        moved = kept = 0
        for path in sorted(p for p in staging.rglob("*") if p.is_file()):
            rel = path.relative_to(staging)
            final = target / rel
            if final.exists():  # verified above if it is a checked file; never overwrite either way
                kept += 1
                continue
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, final)
            moved += 1
        log(f"SentEval data: {moved} files installed, {kept} already present, {len(checksums)} verified, in {target}")
        return {"status": "installed", "installed": moved, "kept": kept, "verified": len(checksums),
                "path": str(target)}
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        archive.unlink(missing_ok=True)


def install_file(dest: Path, name: str, base_url: str, expected: tuple[int, str] | None,
                 log: Callable[[str], None]) -> dict:
    final = dest / name
    if final.exists():
        why = _verify(final, expected)
        if why:
            raise DataError(f"{final}: existing file does not match the expected checksum ({why}); "
                            f"not overwriting it -- move it away and run again")
        log(f"{name}: already present" + (" and verified" if expected else " (no checksum known; not checked)"))
        return {"status": "present", "path": str(final), "verified": expected is not None}
    url = _url(base_url, name)
    log(f"{name}: downloading {url}")
    tmp = _fetch(url, dest, log)
    try:
        size, digest = _sha256(tmp)
        if expected is not None and (size, digest) != tuple(expected):
            raise DataError(f"{url}: downloaded file does not verify (size {size}, sha256 {digest}; expected "
                            f"{expected[0]}, {expected[1]})")
        if final.exists():  # appeared meanwhile (another run): keep it
            return {"status": "present", "path": str(final), "verified": False}
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    log(f"{name}: {size} bytes, sha256 {digest}" + (" (verified)" if expected else ""))
    return {"status": "installed", "path": str(final), "bytes": size, "sha256": digest,
            "verified": expected is not None}


def download(dest: str | os.PathLike | None = None, what: Iterable[str] = ITEMS, base_url: str | None = None, *,
             senteval_checksums: dict[str, tuple[int, str]] | None = None,
             wiki1m_checksum: tuple[int, str] | None = WIKI1M_CHECKSUM,
             log: Callable[[str], None] | None = None) -> dict:
    """Fetch and lay out `DEST/downstream/...` (SentEval layout) and `DEST/wiki1m_for_simcse.txt`.

    `base_url` (else `$MIXCSE_DATA_URL`, else the SimCSE authors' dataset repo) is where both files live.
    The checksum arguments exist so that tests (and mirrors) can supply their own expectations."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    base = base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
    what = [w.strip().lower() for w in what if w.strip()]
    unknown = [w for w in what if w not in ITEMS]
    if unknown or not what:
        raise DataError(f"unknown item(s) {unknown or what}; choose from {', '.join(ITEMS)}")
    dest = Path(dest) if dest is not None else cache_home() / "data"
    if dest.exists() and not dest.is_dir():
        raise DataError(f"--dest {dest} exists and is not a folder")
    created = [p for p in (dest, *dest.parents) if not p.exists()]
    dest.mkdir(parents=True, exist_ok=True)
    report = {}
    try:
        if "senteval" in what:
            report["senteval"] = install_senteval(dest, base, dict(senteval_checksums or SENTEVAL_FILES), log)
        if "wiki1m" in what:
            report["wiki1m"] = install_file(dest, WIKI1M, base, wiki1m_checksum, log)
    except BaseException:
        for folder in created:  # a failed first download leaves no empty folders behind
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        raise
    return report
