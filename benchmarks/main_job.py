"""The README's main job, timed: `mixcse train` on the medical-questions recipe, as a new user runs it.

    python benchmarks/main_job.py            # -> benchmarks/results/main_job.json

Records the run's summary (dev-pair AP start -> best, the held-out test pairs start -> best), its wall time, peak
RSS and the machine; the README's first-run figures come from this file.
"""
from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import common

RECIPE = "recipes/domain/medical-questions-minilm-mixcse.yaml"


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="main-job-") as tmp:
        out = Path(tmp) / "run"
        command = [sys.executable, "-m", "mixcse", "train", RECIPE, f"output_dir={out}"]
        t0 = time.perf_counter()
        done = subprocess.run(command, cwd=common.REPO, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if done.returncode:
            print(done.stderr[-3000:], file=sys.stderr)
            return done.returncode
        summary = json.loads((out / "summary.json").read_text())
    report = [line for line in done.stdout.splitlines() if line.startswith(("start ", "held-out", "next:"))]
    common.write_result("main_job", {"recipe": RECIPE, "wall_seconds": round(wall, 1), "summary": summary,
                                     "report": report,
                                     "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
                                                          / 1024, 1)})
    print("\n".join(report))
    print(f"wall {wall:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
