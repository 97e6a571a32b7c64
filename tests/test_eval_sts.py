"""STS scoring and readers: hand-checked correlations, 'all' vs 'wmean', blank gold lines, file quirks."""
import math
from pathlib import Path

import numpy as np
import pytest

from mixcse.evaluation import evaluate
from mixcse.evaluation.senteval import PairSet, load_sick, load_sts_subset, load_stsb
from mixcse.evaluation.sts import row_cosine, score_sts_task, spearman

pytestmark = pytest.mark.numeric  # rerun on other arithmetic paths (docs/development.md)

FIXTURE = Path(__file__).parent / "fixtures" / "eval" / "downstream"


def unit(cos: float) -> np.ndarray:
    """A 2-d unit vector whose cosine with (1, 0) is `cos`."""
    return np.array([cos, math.sqrt(1 - cos * cos)], dtype=np.float32)


class Lookup:
    """A fake encoder: a fixed vector per sentence."""

    def __init__(self, table):
        self.table = table

    def __call__(self, sentences):
        return np.stack([self.table[s] for s in sentences])


def test_spearman_with_ties_hand_checked(tmp_path):
    # gold  [1, 2, 2, 3]          -> ranks [1, 2.5, 2.5, 4]
    # cos   [0.1, 0.4, 0.3, 0.2]  -> ranks [1, 4, 3, 2]
    # centred ranks g = [-1.5, 0, 0, 1.5], c = [-1.5, 1.5, 0.5, -0.5]
    # sum(g*c) = 2.25 - 0.75 = 1.5; sum(g^2) = 4.5; sum(c^2) = 5
    # rho = 1.5 / sqrt(4.5 * 5) = 1 / sqrt(10) = 0.316228 -> 31.6228 (x100)
    gold, cos = [1, 2, 2, 3], [0.1, 0.4, 0.3, 0.2]
    rows = [f"g\tx\t2012\t{i}\t{g}\ta{i}\tb{i}" for i, g in enumerate(gold)]
    folder = tmp_path / "STS" / "STSBenchmark"
    folder.mkdir(parents=True)
    (folder / "sts-test.csv").write_text("\n".join(rows) + "\n")
    table = {f"a{i}": unit(1.0) for i in range(4)} | {f"b{i}": unit(c) for i, c in enumerate(cos)}
    res = evaluate(Lookup(table), tasks="STSBenchmark", data_dir=tmp_path, verbose=False)
    assert res["sts"]["STSBenchmark"]["spearman"] == pytest.approx(100 / math.sqrt(10), abs=1e-6)
    assert res["sts"]["avg"] == pytest.approx(100 / math.sqrt(10), abs=1e-6)
    assert spearman(cos, gold) == pytest.approx(31.6228, abs=1e-4)


def test_all_and_wmean_differ_on_crafted_example():
    # subset X: gold [1, 2, 3], cos [0.1, 0.2, 0.3] -> Spearman +100 (n=3)
    # subset Y: gold [4, 5],    cos [0.0, -0.5]     -> Spearman -100 (n=2)
    # wmean = (3*100 + 2*(-100)) / 5 = 20; mean = 0
    # all (pooled): gold ranks [1,2,3,4,5]; cos [0.1,0.2,0.3,0.0,-0.5] ranks [3,4,5,2,1]
    #   d = cos rank - gold rank = [2,2,2,-2,-4], sum d^2 = 32, rho = 1 - 6*32/(5*24) = -0.6 -> -60
    table, subsets = {}, {}
    for name, gold, cos in (("X", [1, 2, 3], [0.1, 0.2, 0.3]), ("Y", [4, 5], [0.0, -0.5])):
        a, b = [], []
        for i, c in enumerate(cos):
            table[f"{name}a{i}"], table[f"{name}b{i}"] = unit(1.0), unit(c)
            a.append(f"{name}a{i}")
            b.append(f"{name}b{i}")
        subsets[name] = PairSet(a, b, np.asarray(gold, dtype=float))
    out = score_sts_task(subsets, Lookup(table))
    assert out["subsets"]["X"]["spearman"] == pytest.approx(100)
    assert out["subsets"]["Y"]["spearman"] == pytest.approx(-100)
    assert out["spearman"] == pytest.approx(-60)  # the headline is 'all'
    assert out["all"]["spearman"] == pytest.approx(-60)
    assert out["wmean"]["spearman"] == pytest.approx(20)
    assert out["mean"]["spearman"] == pytest.approx(0)
    assert out["n"] == 5 and out["subsets"]["X"]["n"] == 3


def test_blank_gold_lines_are_skipped(tmp_path):
    folder = tmp_path / "STS" / "STS16-en-test"
    folder.mkdir(parents=True)
    (folder / "STS.input.headlines.txt").write_text("a  one\tb one\nskip me\tskip too\nc\td\nx\ty\ne\tf\n")
    (folder / "STS.gs.headlines.txt").write_text("3\n\n1\n\n2\n")
    ps = load_sts_subset(tmp_path, "STS16", "headlines")
    assert ps.a == ["a one", "c", "e"]  # whitespace re-joined by single spaces
    assert ps.b == ["b one", "d", "f"]
    assert ps.scores.tolist() == [3.0, 1.0, 2.0]
    assert ps.lines == [1, 3, 5]


def test_fixture_blank_lines_counted():
    ps = load_sts_subset(FIXTURE, "STS15", "belief")
    assert len(ps) == 4  # 6 lines, 2 blank gold lines
    assert "  " not in " ".join(ps.a)


def test_stsb_and_sick_fields():
    stsb = load_stsb(FIXTURE, "test")
    assert len(stsb) == 14 and stsb.scores[0] == pytest.approx(4.6)
    sick = load_sick(FIXTURE)
    assert len(sick) == 12  # header skipped
    assert not any("\r" in s for s in sick.sentences())  # CRLF handled
    assert 1.0 <= sick.scores.min() and sick.scores.max() <= 5.0


def test_row_cosine_zero_vector_is_zero():
    a = np.array([[0.0, 0.0], [1.0, 0.0]])
    b = np.array([[1.0, 0.0], [2.0, 0.0]])
    assert row_cosine(a, b).tolist() == [0.0, 1.0]
