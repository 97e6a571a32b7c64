"""The README's two set-up commands: the first two lines of its first ```bash block.

    python3 .ci/readme_commands.py main   # line 1: install and run the main job
    python3 .ci/readme_commands.py test   # line 2: install and run the tests
    python3 .ci/readme_commands.py check  # exit 1 unless the block holds exactly those two commands
"""
import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def commands(text: str) -> list[str]:
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    if block is None:
        raise SystemExit("error: README.md has no ```bash block")
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def main(argv: list[str]) -> int:
    found = commands(README.read_text(encoding="utf-8"))
    if len(argv) != 1 or argv[0] not in ("main", "test", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    if len(found) != 2 or "pytest" not in found[1] or "pip install" not in found[0]:
        print(f"error: README's first bash block must hold exactly the two set-up commands (install + main job, "
              f"install + tests); found {found}", file=sys.stderr)
        return 1
    if argv[0] != "check":
        print(found[0] if argv[0] == "main" else found[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
