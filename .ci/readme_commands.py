"""Check that the README starts with exactly the two set-up commands that .ci/run runs.

    python3 .ci/readme_commands.py check MAIN_COMMAND TEST_COMMAND   # exit 1 unless the README's first ```bash
                                                                     # block holds exactly these two lines
    python3 .ci/readme_commands.py show                              # print the block's lines
"""
import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def commands(text: str) -> list[str]:
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    return [line.strip() for line in block.group(1).splitlines() if line.strip()] if block else []


def main(argv: list[str]) -> int:
    found = commands(README.read_text(encoding="utf-8"))
    if argv[:1] == ["show"] and len(argv) == 1:
        print("\n".join(found))
        return 0
    if argv[:1] != ["check"] or len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    if found != argv[1:]:
        print(f"error: README's first bash block must be exactly {argv[1:]} (what .ci/run runs); found {found}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
