"""Corpora in constant memory: peak RSS and tokenisation throughput of ``corpus: disk`` at 0.4M, 4M and 20M
sentences.

The files are the shared 400k-sentence corpus repeated 1, 10 and 50 times (written once under ``--workdir``). Each
size runs in a fresh process (``python benchmarks/streaming.py --child ...``): open the corpus (tokenise it into a
new cache entry with ``workers`` processes; timed), open it again (the cache hit a second run sees; timed), then
``mixcse.train`` 20 steps on it (stand-in, batch 64, no selection). The process reports its own peak RSS
(``ru_maxrss``: model, training and the build's reading and writing) and that of its tokeniser workers. For contrast,
``corpus: memory`` runs the same 20 steps at 0.4M and 4M (it holds every sentence as a Python string).

Figures: ``peak_rss_ratio_20m_vs_0p4m`` (disk corpus; goal <= 1.2) and ``tokenise_sentences_per_second`` (at 20M).

    python benchmarks/streaming.py               # ~20 min on 2 cores; ~4 GB of disk under --workdir
    python benchmarks/streaming.py --quick       # 0.4M and 1.2M only
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import common  # noqa: F401  (offline env)
from benchmarks.common import CORPUS, STAND_IN, write_result


def write_repeated(path: Path, repeats: int) -> int:
    """The shared corpus ``repeats`` times over, as plain text; returns the number of lines."""
    from mixcse.data.reader import iter_lines

    if path.exists():
        return sum(1 for _ in open(path, "rb"))
    lines = [line for _, line in iter_lines(CORPUS, what="corpus") if line]
    block = ("\n".join(lines) + "\n").encode("utf-8")
    partial = path.with_suffix(".partial")
    with open(partial, "wb") as fh:
        for _ in range(repeats):
            fh.write(block)
    partial.rename(path)
    return len(lines) * repeats


def child(train_file: str, corpus: str, workdir: str) -> None:
    """One measured run in this process; prints one JSON line."""
    import mixcse
    from mixcse.data.loader import open_corpus
    from mixcse.model import load_backbone
    from mixcse.training.config import TrainConfig

    values = {"model": str(STAND_IN), "train_file": train_file, "batch_size": 64, "max_steps": 20,
              "select_on": "none", "log_steps": 10, "corpus": corpus, "corpus_cache_dir": f"{workdir}/cache",
              "num_threads": 2}
    record: dict = {"corpus": corpus}
    if corpus == "disk":
        tokenizer = load_backbone(str(STAND_IN))[1]
        cfg = TrainConfig(output_dir="-", **values)
        t0 = time.perf_counter()
        built, _ = open_corpus(cfg, tokenizer, progress=False)
        record["build_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        open_corpus(cfg, tokenizer, progress=False)
        record["reopen_s"] = time.perf_counter() - t0
        record.update(sequences=len(built), tokens=built.stats["tokens"]["tokens"],
                      tokenise_sentences_per_second=len(built) / record["build_s"])
        del built, tokenizer
    out = Path(workdir) / f"run-{corpus}-{Path(train_file).stem}"
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    result = mixcse.train(values | {"output_dir": str(out)}, progress=False)
    record.update(train_s=time.perf_counter() - t0, steps=result.steps,
                  peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  workers_peak_rss_mb=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
    shutil.rmtree(out, ignore_errors=True)
    print("RESULT " + json.dumps(record), flush=True)


def measure(train_file: Path, corpus: str, workdir: Path) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", str(train_file), corpus, str(workdir)],
                          capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    record = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    print(f"  {corpus:6s} {train_file.name}: peak RSS {record['peak_rss_mb']:.0f} MB"
          + (f", tokenised {record['sequences']:,} in {record['build_s']:.0f} s "
             f"({record['tokenise_sentences_per_second']:,.0f}/s), reopened in {record['reopen_s']:.2f} s"
             if corpus == "disk" else ""), flush=True)
    return record


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(*sys.argv[2:5])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "mixcse-streaming"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the corpus files and cache entries")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(workdir / "cache", ignore_errors=True)  # every build is measured from scratch
    repeats = {"0p4m": 1, "1p2m": 3} if args.quick else {"0p4m": 1, "4m": 10, "20m": 50}
    rows = {}
    for name, times in repeats.items():
        path = workdir / f"corpus-{name}.txt"
        n = write_repeated(path, times)
        print(f"{name}: {n:,} sentences", flush=True)
        rows[name] = {"sentences": n, "disk": measure(path, "disk", workdir)}
        if name in ("0p4m", "4m"):
            rows[name]["memory"] = measure(path, "memory", workdir)
    largest = list(repeats)[-1]
    ratio = rows[largest]["disk"]["peak_rss_mb"] / rows["0p4m"]["disk"]["peak_rss_mb"]
    summary = {f"peak_rss_ratio_{largest}_vs_0p4m": ratio,
               "tokenise_sentences_per_second": rows[largest]["disk"]["tokenise_sentences_per_second"]}
    print(f"peak RSS, disk corpus {largest} / 0.4M: {ratio:.2f} (goal <= 1.2); tokenisation "
          f"{summary['tokenise_sentences_per_second']:,.0f} sentences/s")
    write_result("streaming_quick" if args.quick else "streaming", {
        "setting": {"model": "stand-in (mini-wiki-mlm)", "batch_size": 64, "train_steps": 20, "max_seq_length": 32},
        **summary, "rows": rows})
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
