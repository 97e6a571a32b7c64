"""The benchmarks of mixcse: each module runs as ``python -m benchmarks.NAME`` from the repository root and writes
its figures to ``benchmarks/results/NAME.json``. Not part of the installed package; imports ``mixcse`` and nothing
from ``tests/``."""
