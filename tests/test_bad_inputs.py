"""Every CLI verb refuses bad input with one ``error:`` line and exit code 2, and writes nothing.

One table of cases: (command line, fragment the error line must hold). Placeholders in the command line:
{model} a tiny BERT folder, {corpus} a plain-text corpus, {recipe} a valid recipe, {out} a fresh output folder,
{tmp} a folder of bad files (see ``bad_files``); the fragment may name {tmp} too.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mixcse
from mixcse.cli import main
from mixcse.training.rundir import LOCK_FILE

CASES = [
    # --- mixcse train: the recipe and its overrides
    ("train {tmp}/missing.yaml", "recipe not found"),
    ("train {tmp}/list.yaml", "must be a mapping of config keys"),
    ("train {tmp}/broken.yaml", "is not valid YAML"),
    ("train {tmp}/binary.yaml", "is not UTF-8 text"),
    ("train {recipe} no_such_key=1", "unknown config key 'no_such_key'"),
    ("train {recipe} batch_sise=8", "did you mean 'batch_size'"),
    ("train {recipe} batch_size=abc", "'batch_size' must be int"),
    ("train {recipe} model=[1,2]", "'model' must be str"),
    ("train {recipe} batch_size", "is not of the form key=value"),
    ("train {recipe} =3", "is not of the form key=value"),
    ("train {recipe} learning_rate=nan", "'learning_rate' must be a finite number, got nan"),
    ("train {recipe} learning_rate=inf", "'learning_rate' must be a finite number, got inf"),
    ("train {recipe} learning_rate=-1e-5", "'learning_rate' must be > 0"),
    ("train {recipe} temperature=nan", "'temperature' must be a finite number"),
    ("train {recipe} temperature=0", "'temperature' must be > 0"),
    ("train {recipe} lam=nan", "'lam' must be a finite number"),
    ("train {recipe} lam=2", "lam must be in [0, 1)"),
    ("train {recipe} warmup_ratio=nan", "'warmup_ratio' must be a finite number"),
    ("train {recipe} weight_decay=-0.1", "'weight_decay' must be >= 0"),
    ("train {recipe} max_grad_norm=.inf", "'max_grad_norm' must be a finite number"),
    # --- mixcse train: documents in and checkpoint selection (docs/domain-adaptation.md)
    ("train {recipe} train_file={tmp}/bad.jsonl", "bad.jsonl:2: invalid JSON"),
    ("train {recipe} train_file={tmp}/bad.jsonl text_column=body", "no column 'body'"),
    ("train {recipe} segment=paragraph", "segment"),
    ("train {recipe} select_on=retrieval", "needs select_data"),
    ("train {recipe} select_on=retrieval select_data={tmp}/nowhere", "select_data not found"),
    ("train {recipe} select_on=retrieval select_data={tmp} select_split=test", "select_split test is refused"),
    ("train {recipe} select_on=pairs select_data={tmp}/empty.txt", "no pairs"),
    ("train {recipe} select_on=pairs select_data={tmp}/ones.tsv", "only one label value"),
    ("train {recipe} guard_data={tmp}/nowhere.tsv", "guard_data not found"),
    ("train {recipe} guard_data={tmp}/ones.tsv", "only one label value"),
    ("train {recipe} max_seq_length=100000", "max_seq_length 100000 exceeds the 128 positions"),
    ("train {recipe} interpolate=[0.5,-2]", "interpolate must list blend weights > 0"),
    ("train {recipe} guard_data=[stsb_dev,{tmp}/ones.tsv] guard_tolerance=[0.3]",
     "guard_tolerance lists 1 tolerances for 2 guard_data entries"),
    ("train {recipe} guard_data=[stsb_dev,stsb_dev] guard_tolerance=[0.3,.nan]", "must be >= 0 and finite"),
    ("train {recipe} guard_data=[stsb_dev] guard_tolerance=[-1]", "must be >= 0 and finite"),
    ("train {recipe} guard_data=[{tmp}/nowhere.tsv,{tmp}/ones.tsv]", "guard_data not found: {tmp}/nowhere.tsv"),
    ("train {recipe} positives=mined corpus=disk", "positives mined needs corpus: memory"),
    ("train {recipe} select_on=bleu", "select_on must be one of"),
    ("train {recipe} data_dir={tmp}/nowhere", "no STS-B dev file"),
    ("train {recipe} report_to=mlflow", "report_to must be"),
    ("train {recipe} --resume", "no checkpoint"),
    ("train {recipe} batch_size=-4", "'batch_size' must be >= 1"),
    ("train {recipe} mini_batch_size=0", "'mini_batch_size' must be >= 1"),
    ("train {recipe} corpus=mmap", "corpus must be one of memory, disk"),
    ("train {recipe} positives=next", "positives must be one of dropout, neighbours, title"),
    ("train {recipe} positives=title corpus=disk", "needs corpus: memory"),
    ("train {recipe} positives=title", "needs documents with a title"),
    ("train {recipe} positives=augment corpus=disk", "positives augment needs corpus: memory"),
    ("train {recipe} positives=augment 'augment={{swap_words: 0.5}}'", "augment: unknown operator 'swap_words'"),
    ("train {recipe} positives=augment 'augment={{drop_token: 1.5}}'", "probability of drop_token must be in [0, 1]"),
    ("train {recipe} positives=augment 'augment={{drop_token: -0.1}}'",
     "probability of drop_token must be in [0, 1]"),
    ("train {recipe} positives=augment 'augment={{drop_token: 0.6, delete_span: 0.6}}'",
     "add up to 1.2, more than 1"),
    ("train {recipe} positives=augment augment=0.5", "'augment' must be a mapping of names to numbers or null"),
    ("train {recipe} 'augment={{drop_token: 0.5}}'", "augment set, but positives is dropout"),
    ("train {recipe} positives=augment augment_views=three", "augment_views must be one or both"),
    ("train {recipe} batch_size=16 mini_batch_size=5", "mini_batch_size 5 does not divide batch_size 16"),
    ("train {recipe} max_steps=0", "'max_steps' must be >= 1"),
    ("train {recipe} loss=nope", "loss must be one of"),
    ("train {recipe} pooler=nope", "pooler must be one of"),
    ("train {recipe} precision=fp64", "precision must be one of"),
    ("train {recipe} model=", "config key 'model' is required"),
    # --- mixcse train: files
    ("train {recipe} train_file={tmp}/corrupt.gz", "Error -3 while decompressing"),
    ("train {recipe} train_file={tmp}/missing.txt", "not found"),
    ("train {recipe} train_file={tmp}/empty.txt", "has no sentences"),
    ("train {recipe} model={tmp}/not-a-model", "no config.json; no tokenizer files"),
    ("train {recipe} model={tmp}/missing-model", "model path does not exist"),
    ("train {recipe} model={tmp}/empty.txt", "model path is a file, not a model folder"),
    ("train {recipe} output_dir={tmp}/empty.txt", "output_dir exists and is not a directory"),
    ("train {recipe} output_dir={tmp}/full", "is not empty; pass --overwrite"),
    ("train {recipe} model={tmp}/truncated-model", "damaged weights file {tmp}/truncated-model/model.safetensors"),
    ("train {recipe} model={tmp}/garbage-model", "damaged weights file {tmp}/garbage-model/model.safetensors"),
    # --- mixcse train --resume and the run folder ({tmp}/run: a finished 2-step run of {recipe} with select_on=none)
    ("train {recipe} output_dir={tmp}/truncated-run select_on=none --resume",
     "the checkpoint {tmp}/truncated-run/checkpoint/state.pt is damaged"),
    ("train {recipe} output_dir={tmp}/truncated-run select_on=none --resume", "best, the best model so far, is intact"),
    ("train {recipe} output_dir={tmp}/run select_on=none loss=simcse --resume",
     "--resume cannot change loss ('mixcse' -> 'simcse')"),
    ("train {recipe} output_dir={tmp}/run select_on=none temperature=0.1 pooler=avg --resume",
     "cannot change temperature (0.05 -> 0.1), pooler ('cls' -> 'avg')"),
    ("train {recipe} output_dir={tmp}/run select_on=none batch_size=4 --resume", "pass --overwrite or use a new"),
    ("train {recipe} output_dir={tmp}/run select_on=none max_steps=1 --resume", "at step 2, beyond the 1 steps"),
    # {tmp}/locked: a copy of {tmp}/run whose lock another process holds
    ("train {recipe} output_dir={tmp}/locked select_on=none --overwrite", "is in use by another mixcse train"),
    ("train {recipe} output_dir={tmp}/locked select_on=none --resume", "is in use by another mixcse train"),
    # --- mixcse eval
    ("eval {tmp}/not-a-model --tasks STSBenchmark", "no config.json; no tokenizer files"),
    ("eval {tmp}/missing-model --tasks STSBenchmark", "model path does not exist"),
    ("eval {tmp}/truncated-model --tasks STSBenchmark", "damaged weights file {tmp}/truncated-model/model.safetensors"),
    ("eval {model} --tasks nope", "unknown task 'nope'"),
    ("eval {model} --tasks retrieval", "--tasks retrieval needs --retrieval-data"),
    ("eval {model} --tasks retrieval --retrieval-data {tmp}", "no qrels for split 'test'"),
    ("eval {model} --tasks retrieval --retrieval-data {tmp}/nowhere", "not found"),
    ("eval {model} --tasks ,", "no tasks given"),
    ("eval {model} --tasks pairs --pairs-data {tmp}/ones.tsv", "only one label value"),
    ("eval {model} --batch-size -1", "--batch-size must be at least 1"),
    ("eval {model} --batch-size abc", "invalid int value: 'abc'"),
    ("eval {model} --workers 0", "--workers must be at least 1"),
    ("eval {model} --mode nope", "invalid choice: 'nope'"),
    ("eval {model} --tasks STSBenchmark --data-dir {tmp}/no-data", "benchmark data folder not found"),
    ("eval {model} --tasks STSBenchmark --data-dir {tmp}/full", "task folder not found"),
    ("eval {model} --tasks STSBenchmark --output {tmp}/empty.txt", "exists; pass --overwrite"),
    ("eval {model} --tasks STSBenchmark --output {tmp}/full --overwrite", "is a folder"),
    ("eval {model} --tasks STSBenchmark --cache-dir {tmp}/empty.txt", "--cache-dir"),
    ("eval {model} --tasks STSBenchmark --pooler nope", "unknown pooler 'nope'"),
    # --- mixcse encode
    ("encode {model} --input {tmp}/corrupt.gz --output {out}/e.npy", "Error -3 while decompressing"),
    ("encode {model} --input {tmp}/missing.txt --output {out}/e.npy", "input file not found"),
    ("encode {model} --input {tmp}/empty.txt --output {out}/e.npy", "has no sentences"),
    # the one reader checks NUL first
    ("encode {model} --input {tmp}/binary.yaml --output {out}/e.npy", "not a text file (NUL byte)"),
    ("encode {model} --input {corpus} --output {out}/e.txt", "--output must end in .npy or .safetensors"),
    ("encode {model} --input {corpus} --output {tmp}/existing.npy", "exists; pass --overwrite"),
    ("encode {model} --input {corpus} --output {tmp}/empty.txt/e.npy", "is a file, not a folder"),
    ("encode {model} --input {corpus} --output {out}/e.npy --batch-size -2", "--batch-size: must be >= 1"),
    ("encode {tmp}/not-a-model --input {corpus} --output {out}/e.npy", "no config.json"),
    ("encode {model} --input {corpus} --output {out}/e.npy --device nope", "cannot load model"),
    ("encode {tmp}/truncated-model --input {corpus} --output {out}/e.npy",
     "damaged weights file {tmp}/truncated-model/model.safetensors"),
    ("encode {tmp}/garbage-model --input {corpus} --output {out}/e.npy", "it is truncated or not a safetensors file"),
    ("encode {model} --input {corpus}", "the following arguments are required: --output"),
    # --- mixcse search
    ("search {model} --corpus {tmp}/missing.txt --query a", "corpus file not found"),
    ("search {tmp}/garbage-model --corpus {corpus} --query a",
     "damaged weights file {tmp}/garbage-model/model.safetensors"),
    ("search {model} --corpus {tmp}/corrupt.gz --query a", "Error -3 while decompressing"),
    ("search {model} --corpus {corpus} --query ''", "--query must not be empty"),
    ("search {model} --corpus {corpus} --query a --top-k 0", "--top-k: must be >= 1"),
    ("search {model} --corpus {corpus} --query a --corpus-embeddings {tmp}/missing.npy", "embeddings file not found"),
    ("search {model} --corpus {corpus} --query a --corpus-embeddings {tmp}/vector.npy", "expected a 2-D array"),
    ("search {model} --corpus {corpus} --query a --corpus-embeddings {tmp}/existing.npy", "has 3 rows"),
    ("search {model} --corpus {corpus} --query a --corpus-embeddings {tmp}/garbage.npy", "cannot read embeddings"),
    ("search {model} --corpus {corpus} --query a --backend onnx", "has no onnx/model.onnx; write it with"),
    # --- mixcse export, and the onnx backend on a folder without its graph (tests/test_onnx.py: more refusals)
    ("export {tmp}/not-a-model --output {out}/x", "no config.json; no tokenizer files"),
    ("export {tmp}/missing-model --output {out}/x", "model path does not exist"),
    ("export {tmp}/empty.txt --output {out}/x", "is not a model folder"),
    ("export {model} --output {tmp}/full", "full exists; choose a new folder"),
    ("export {model} --output {tmp}/empty.txt/x", "is a file, not a folder"),
    ("export {model} --output {out}/x --format tflite", "invalid choice: 'tflite'"),
    ("export {model} --output {out}/x --quantize int4", "invalid choice: 'int4'"),
    ("export {model}", "the following arguments are required: --output"),
    ("encode {model} --input {corpus} --output {out}/e.npy --backend onnx", "has no onnx/model.onnx"),
    ("encode {model} --input {corpus} --output {out}/e.npy --precision int8", "--precision int8 needs --backend onnx"),
    ("eval {model} --tasks STSBenchmark --backend onnx", "has no onnx/model.onnx"),
    ("eval {model} --tasks STSBenchmark --precision int8", "--precision int8 needs --backend onnx"),
    # --- mixcse merge (tests/test_merge.py: more refusals)
    ("merge {model} {model} --weights 0.5 0.6 --output {out}/m", "--weights sum to 1.1, not 1"),
    ("merge {model} {tmp}/not-a-model --output {out}/m", "no config.json; no tokenizer files"),
    ("merge {model} {model} --output {tmp}/full", "full exists; choose a new folder"),
    ("merge {model} --output {out}/m", "merge needs at least two models"),
    ("merge {model} {model} --select-data {tmp}/ones.tsv --output {out}/m", "only one label value"),
    ("merge {model} {model} --select-data {tmp}/nowhere.tsv --output {out}/m", "select_data not found"),
    ("merge {model} {model} --guard-data stsb_dev --output {out}/m", "give --select-data too"),
    ("merge {model} {model} --select-data {tmp}/ones.tsv --weights 0.5 0.5 --output {out}/m",
     "go without --select-data"),
    ("merge {model} {model} {model} --select-data {tmp}/ones.tsv --output {out}/m", "of two models"),
    ("merge {model} {model} --select-data {tmp}/ones.tsv --guard-data stsb_dev stsb_dev --guard-tolerance 1 2 3 "
     "--output {out}/m", "gives 3 values for 2 guards"),
    ("merge {model} {model} --select-data {tmp}/ones.tsv --guard-tolerance -1 --output {out}/m", ">= 0"),
    # --- mixcse data
    ("data download --what nope --dest {out}", "unknown item(s)"),
    ("data download --dest {tmp}/empty.txt", "exists and is not a folder"),
    ("data download --dest {out}/data --base-url file:///nonexistent/", "download failed"),
    ("data nope", "invalid choice: 'nope'"),
    # --- the command itself
    ("nope", "invalid choice: 'nope'"),
    ("", "the following arguments are required: command"),
]


def hold_lock(folder: Path) -> subprocess.Popen:
    """Another process that holds the run lock of ``folder`` until it is killed."""
    code = ("import fcntl, sys, time; handle = open(sys.argv[1], 'a'); fcntl.flock(handle, fcntl.LOCK_EX); "
            "print('locked', flush=True); time.sleep(600)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(folder / LOCK_FILE)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory, tiny_bert, synthetic_data) -> Path:
    tmp = tmp_path_factory.mktemp("bad")
    for name, damage in (("truncated-model", lambda data: data[:len(data) // 2]),
                         ("garbage-model", lambda data: b"\x00garbage" * 64)):
        shutil.copytree(tiny_bert, tmp / name)
        weights = tmp / name / "model.safetensors"
        weights.write_bytes(damage(weights.read_bytes()))
    # a finished run of the recipe below (with select_on=none), one copy with a cut-off checkpoint, one locked
    mixcse.train({"model": str(tiny_bert), "train_file": str(synthetic_data["corpus"]), "output_dir": str(tmp / "run"),
                  "max_steps": 2, "batch_size": 8, "select_on": "none"}, progress=False)
    for name in ("truncated-run", "locked"):
        shutil.copytree(tmp / "run", tmp / name)
    state = tmp / "truncated-run/checkpoint/state.pt"
    state.write_bytes(state.read_bytes()[:state.stat().st_size // 2])
    (tmp / "corrupt.gz").write_bytes(gzip.compress(b"one sentence\n")[:10] + b"\xff" * 40)  # valid header, garbage
    (tmp / "list.yaml").write_text("- a\n- b\n")
    (tmp / "broken.yaml").write_text("model: x\n  bad: [\n")
    (tmp / "binary.yaml").write_bytes(b"\xff\xfe\x00model")
    (tmp / "empty.txt").write_text("")
    (tmp / "ones.tsv").write_text("sentence1\tsentence2\tlabel\na b\ta c\t1\nd e\td f\t1\n")
    (tmp / "bad.jsonl").write_text('{"_id": "1", "text": "a fine document here"}\n{"_id": "2", "text": \n')
    (tmp / "not-a-model").mkdir()
    (tmp / "not-a-model" / "notes.json").write_text("{}")
    (tmp / "full").mkdir()
    (tmp / "full" / "keep.txt").write_text("user data\n")
    np.save(tmp / "existing.npy", np.zeros((3, 4), dtype=np.float32))
    np.save(tmp / "vector.npy", np.zeros(3, dtype=np.float32))
    (tmp / "garbage.npy").write_bytes(b"not numpy")
    holder = hold_lock(tmp / "locked")
    yield tmp
    holder.kill()
    holder.wait()


def _snapshot(*roots: Path) -> dict[str, tuple[int, float]]:
    files = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                files[str(p)] = (p.stat().st_size, p.stat().st_mtime) if p.is_file() else (-1, 0.0)
    return files


@pytest.mark.parametrize("argv, fragment", CASES, ids=[c[0] or "(no command)" for c in CASES])
def test_bad_input_is_one_error_line_exit_2_nothing_written(argv, fragment, bad_files, tiny_bert, synthetic_data,
                                                            tmp_path, capsys, monkeypatch):
    import shlex

    out = tmp_path / "out"
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"model: {tiny_bert}\ntrain_file: {synthetic_data['corpus']}\noutput_dir: {out}\n"
                      f"max_steps: 2\nbatch_size: 8\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MIXCSE_DATA", raising=False)
    args = shlex.split(argv.format(model=tiny_bert, corpus=synthetic_data["corpus"], recipe=recipe, out=out,
                                   tmp=bad_files))
    before = _snapshot(bad_files, tmp_path, tiny_bert)
    try:
        rc = main(args)
    except SystemExit as exc:  # argparse
        rc = exc.code
    err = capsys.readouterr().err
    error_lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert rc == 2, err
    assert len(error_lines) == 1 and fragment.format(tmp=bad_files) in error_lines[0], err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == error_lines[0]
    assert _snapshot(bad_files, tmp_path, tiny_bert) == before, "a refused command wrote files"


def test_a_lock_left_by_a_killed_run_does_not_block(tiny_bert, synthetic_data, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    holder = hold_lock(out)
    holder.kill()  # the lock dies with its process; the lock file stays
    holder.wait()
    assert (out / LOCK_FILE).exists()
    mixcse.train({"model": str(tiny_bert), "train_file": str(synthetic_data["corpus"]), "output_dir": str(out),
                  "max_steps": 1, "batch_size": 8, "select_on": "none"}, progress=False)
    assert (out / "best").is_dir()
