"""The manual's numbers and words: every generated table is what its results JSON renders; every results file a doc
cites exists and is valid JSON; every page or image a doc links to exists; no page speaks of how the project was
made (targets, status notes, "runnable at commit X") or names the development machine's data folder.

The figures of README.md and docs/**/*.md come from committed benchmarks/results/ files; a doc names its file as a
path (`benchmarks/results/NAME.json`, a folder such as `benchmarks/results/gpu_check/`), as a bare file name next
to such a path (`factors_standin.json`, brace lists like `a_{x,y}.json` included) or as a markdown link. The
scanners below are tested on small fake texts first, so a broken pattern cannot pass silently."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path("benchmarks/results")

# Bare *.json names in the docs that are not results files: what a run, a model folder or a command given in the
# text writes (run summaries, model configs, an --output the reader picks, the output of a benchmark mode not run).
NOT_RESULTS = {"summary.json", "config.json", "sentence_bert_config.json", "modules.json", "mixcse.json",
               "results.json", "raw.json", "gpu_step_compile.json"}

RESULTS_PATH = re.compile(r"benchmarks/results/(?:[\w.-]+/)*[\w.-]*")
JSON_NAME = re.compile(r"(?:[\w./<>*-]|\{[\w.,-]*\})+\.json\b")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def doc_files(repo: Path = REPO) -> list[Path]:
    return [repo / "README.md"] + sorted((repo / "docs").rglob("*.md"))


def expand_braces(name: str) -> list[str]:
    """``a_{x,y}.json`` -> ``a_x.json``, ``a_y.json`` (one brace group at a time, recursively)."""
    m = re.search(r"\{([^{}]*)\}", name)
    if not m:
        return [name]
    return [out for part in m.group(1).split(",")
            for out in expand_braces(name[:m.start()] + part + name[m.end():])]


def is_placeholder(name: str) -> bool:
    stem = Path(name.rstrip("/")).name.split(".")[0]
    return any(c in name for c in "<>*") or (stem.isupper() and stem.isalpha())


def cited_results(text: str) -> tuple[set[str], set[str]]:
    """(paths under benchmarks/results/ that ``text`` names, bare *.json names it names)."""
    paths = set()
    for match in RESULTS_PATH.findall(text):
        path = match.rstrip(".")  # a sentence's full stop, or the "..." of an elided name
        if not is_placeholder(path):
            paths.add(path)
    bare = set()
    for token in JSON_NAME.findall(text):
        if "/" in token or is_placeholder(token):
            continue  # paths are handled above (other folders are not results); placeholders name nothing
        bare.update(expand_braces(token))
    return paths, bare - NOT_RESULTS


def links(text: str) -> set[str]:
    """Relative link and image targets of ``text``, without their #anchor."""
    out = set()
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # https:, mailto:, in-page anchors
        out.add(target.split("#", 1)[0])
    return out


def json_problem(path: Path) -> str | None:
    try:
        json.loads(path.read_text(encoding="utf-8"),
                   parse_constant=lambda c: (_ for _ in ()).throw(ValueError(f"non-standard constant {c}")))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return f"not valid JSON ({e})"
    return None


def problems(doc: Path, repo: Path = REPO) -> list[str]:
    """What ``doc`` cites that is missing or broken, one line each."""
    text = doc.read_text(encoding="utf-8")
    rel = doc.relative_to(repo)
    results_dir = repo / RESULTS
    found: list[str] = []

    def check(target: Path, cited: str) -> None:
        if not target.exists():
            found.append(f"{rel}: {cited} does not exist")
        elif target.is_file() and target.suffix == ".json" and results_dir in target.resolve().parents:
            problem = json_problem(target)
            if problem:
                found.append(f"{rel}: {cited} is {problem}")

    paths, bare = cited_results(text)
    for path in sorted(paths):
        check(repo / path, path)
    known = {p.name for p in results_dir.rglob("*.json")} if results_dir.is_dir() else set()
    for name in sorted(bare):
        if name not in known:
            found.append(f"{rel}: {name} is not a file under {RESULTS}/")
    for name in sorted(bare & known):
        for path in results_dir.rglob(name):
            check(path, str(path.relative_to(repo)))
    for target in sorted(links(text)):
        check((doc.parent / target).resolve(), f"link {target}")
    return found


@pytest.fixture
def fake_repo(tmp_path: Path) -> Path:
    (tmp_path / "benchmarks/results/sub").mkdir(parents=True)
    (tmp_path / "benchmarks/results/ok.json").write_text('{"a": 1.5}')
    (tmp_path / "benchmarks/results/sub/inner_one.json").write_text("[1, 2]")
    (tmp_path / "benchmarks/results/sub/inner_two.json").write_text("[3]")
    (tmp_path / "benchmarks/results/broken.json").write_text('{"a": ')
    (tmp_path / "benchmarks/results/nan.json").write_text('{"a": NaN}')
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/page.md").write_text("# page\n")
    (tmp_path / "docs/figure.png").write_bytes(b"\x89PNG")
    return tmp_path


def test_the_scanner_passes_a_doc_whose_citations_exist(fake_repo: Path):
    doc = fake_repo / "docs/good.md"
    doc.write_text("From `benchmarks/results/ok.json`, `inner_{one,two}.json` and benchmarks/results/sub/.\n"
                   "See [the page](page.md#a-section), ![a figure](figure.png), [out](https://example.org),\n"
                   "[here](#top); run summaries (`summary.json`) and `benchmarks/results/NAME.json` name no file.\n")
    assert problems(doc, fake_repo) == []


def test_the_scanner_fails_on_a_missing_or_invalid_results_file_and_a_dead_link(fake_repo: Path):
    doc = fake_repo / "README.md"
    doc.write_text("Measured (benchmarks/results/gone.json). Also `benchmarks/results/broken.json`,\n"
                   "benchmarks/results/nan.json, `missing_table.json`, benchmarks/results/nofolder/.\n"
                   "[a page](docs/nowhere.md) and ![a plot](docs/plot.png).\n")
    found = problems(doc, fake_repo)
    assert found == ["README.md: benchmarks/results/broken.json is not valid JSON (Expecting value: line 1 column 7 "
                     "(char 6))",
                     "README.md: benchmarks/results/gone.json does not exist",
                     "README.md: benchmarks/results/nan.json is not valid JSON (non-standard constant NaN)",
                     "README.md: benchmarks/results/nofolder/ does not exist",
                     "README.md: missing_table.json is not a file under benchmarks/results/",
                     "README.md: link docs/nowhere.md does not exist",
                     "README.md: link docs/plot.png does not exist"], found


def test_the_scanner_sees_the_real_docs_citations():
    """Guards the patterns: the docs cite many results files, by path and by bare name, and link many pages."""
    paths, bare, targets = set(), set(), set()
    for doc in doc_files():
        text = doc.read_text(encoding="utf-8")
        p, b = cited_results(text)
        paths |= p
        bare |= b
        targets |= links(text)
    assert "benchmarks/results/paper_claims_fp32.json" in paths
    assert {"standin_senteval-pytorch.json", "seeds_probe_standin_gpu.json"} <= bare
    assert len(paths) >= 15 and any(t.endswith(".png") for t in targets) and "docs/training.md" in targets


def test_every_results_file_and_page_the_docs_cite_exists():
    found = [line for doc in doc_files() for line in problems(doc)]
    assert not found, "\n".join(found)


def test_the_generated_tables_are_what_their_json_renders():
    """`python -m benchmarks.report --check` (a process: tests/ does not import benchmarks/) regenerates every block
    of README.md and docs/ from the committed JSON and fails naming each block that differs."""
    run = subprocess.run([sys.executable, "-m", "benchmarks.report", "--check"], cwd=REPO, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]


# Sentences about how the project was made, not what the library does or what was measured.
PROCESS = re.compile(r"runnable at commit|in git history at commit|command at commit|\bgoals? ?(?:≤|<=|:|\()|"
                     r"\btarget (?:of|was|is) \d|\bnot reached\b|\bran out\b|\bwas shared\b|\bStatus \(|"
                     r"just missed|: met\b|\|\s*(?:target|met)\s*\||shared (?:2-core|CPU|machine)|other jobs",
                     re.IGNORECASE)
AT_COMMIT = re.compile(r"\bat commit [0-9a-f]{7}")  # a citation that cannot be rerun: docs/archive.md's to make
DEV_PATH = re.compile(r"\.\./shared")  # the development machine's data folder; a reader's machine has none
# docs/archive.md names the release of each finished study; docs/development.md says where CI finds its data.
ALLOWED = {AT_COMMIT: {"docs/archive.md"}, DEV_PATH: {"README.md", "docs/development.md"}}


def voice_problems(rel: str, text: str) -> list[str]:
    """The sentences of page ``rel`` (relative path) that PROCESS, AT_COMMIT or DEV_PATH find."""
    return [f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
            for pattern in (PROCESS, AT_COMMIT, DEV_PATH) if rel not in ALLOWED.get(pattern, ())
            for m in pattern.finditer(text)]


def test_the_voice_scanner_finds_process_sentences_and_passes_other_senses():
    bad = ("the target of 90.12 was not reached. Memory: 1.33× (goal ≤ 1.5: met). Status (2026-11-30): complete. "
           "`speed sts` (runnable at commit f83854b); the machine was shared; we ran out of time; 1.42 (just missed)"
           "; | metric | target | met |; data in ../shared/data")
    found = [line.split(": ", 1)[1] for line in voice_problems("docs/x.md", bad)]
    assert found == ["'target of 9'", "'not reached'", "'goal ≤'", "': met'", "'Status ('", "'runnable at commit'",
                     "'was shared'", "'ran out'", "'just missed'", "'| target |'", "'at commit f83854b'",
                     "'../shared'"], found
    fine = ("Adapt to a target domain. The sentence 'my goals for today' is an example. We met the paper's recipe "
            "at the shared step; the targets are labels. See docs/archive.md.")
    assert voice_problems("docs/x.md", fine) == []
    assert voice_problems("docs/archive.md", "mixcse 0.1.0, source tree at commit 51eefed") == []
    assert voice_problems("docs/development.md", "CI reads ../shared/data") == []


def test_the_manual_speaks_of_the_library_and_not_of_its_making():
    found = [line for doc in doc_files()
             for line in voice_problems(str(doc.relative_to(REPO)), doc.read_text(encoding="utf-8"))]
    assert not found, "\n".join(found)
