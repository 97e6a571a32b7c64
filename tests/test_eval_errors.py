"""Missing or malformed data gives one DataError naming the file and line; the CLI prints it as `error: ...`."""
import shutil
from pathlib import Path

import numpy as np
import pytest

from mixcse import cli
from mixcse.evaluation import DataError, evaluate
from mixcse.evaluation.senteval import load_mrpc, load_sts_subset, load_stsb, load_trec
from mixcse.models import inference

FIXTURE = Path(__file__).parent / "fixtures" / "eval" / "downstream"


def fake(sentences):
    return np.ones((len(sentences), 4), dtype=np.float32)


@pytest.fixture
def data(tmp_path):
    dst = tmp_path / "downstream"
    shutil.copytree(FIXTURE, dst)
    return dst


def test_line_count_mismatch_names_file_and_line(data):
    gold = data / "STS" / "STS12-en-test" / "STS.gs.MSRvid.txt"
    gold.write_text(gold.read_text() + "4.0\n")  # one gold line too many
    with pytest.raises(DataError, match=r"STS\.gs\.MSRvid\.txt:7: .*6 lines.*7"):
        load_sts_subset(data, "STS12", "MSRvid")


def test_non_numeric_score_names_file_and_line(data):
    gold = data / "STS" / "STS14-en-test" / "STS.gs.images.txt"
    lines = gold.read_text().splitlines()
    lines[2] = "high"
    gold.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"STS\.gs\.images\.txt:3: score 'high' is not a number"):
        load_sts_subset(data, "STS14", "images")
    path = data / "STS" / "STSBenchmark" / "sts-test.csv"
    rows = path.read_text().splitlines()
    fields = rows[4].split("\t")
    fields[4] = "n/a"
    rows[4] = "\t".join(fields)
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(DataError, match=r"sts-test\.csv:5: score 'n/a' is not a number"):
        load_stsb(data, "test")


def test_missing_task_folder_and_file(data):
    shutil.rmtree(data / "STS" / "STS13-en-test")
    with pytest.raises(DataError, match=r"STS13-en-test: task folder not found"):
        evaluate(fake, tasks="STS13", data_dir=data, verbose=False)
    shutil.rmtree(data / "MRPC")
    with pytest.raises(DataError, match=r"MRPC: task folder not found"):
        load_mrpc(data)
    (data / "TREC" / "TREC_10.label").unlink()
    with pytest.raises(DataError, match=r"TREC_10\.label: file not found"):
        load_trec(data)
    with pytest.raises(DataError, match="not found"):
        evaluate(fake, tasks="sts", data_dir=data / "nope", verbose=False)


def test_too_few_fields_and_bad_labels(data):
    inp = data / "STS" / "STS16-en-test" / "STS.input.plagiarism.txt"
    lines = inp.read_text().splitlines()
    lines[0] = "no tab here"
    inp.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"STS\.input\.plagiarism\.txt:1: expected at least 2"):
        load_sts_subset(data, "STS16", "plagiarism")
    trec = data / "TREC" / "train_5500.label"
    trec.write_bytes(trec.read_bytes() + b"XYZ:foo what is this ?\n")
    with pytest.raises(DataError, match=r"train_5500\.label:61: unknown TREC class 'XYZ'"):
        load_trec(data)


def test_cli_prints_one_error_line(data, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(inference, "open_encoder", lambda model, **kwargs: fake)
    (data / "SICK" / "SICK_test_annotated.txt").write_text("pair_ID\tA\tB\tscore\n1\ta\tb\tbad\n")
    rc = cli.main(["eval", "some-model", "--tasks", "SICK-R", "--data-dir", str(data)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0
    assert err[-1].startswith("error: ") and "SICK_test_annotated.txt:2: score 'bad'" in err[-1]
    rc = cli.main(["eval", "m", "--tasks", "bogus", "--data-dir", str(data)])
    assert rc != 0 and capsys.readouterr().err.strip().startswith("error: unknown task 'bogus'")
