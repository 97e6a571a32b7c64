"""DDP on CPU (gloo, 2 processes) sees the global batch: same loss and gradients as one process on that batch."""

import json
import os
import socket
import subprocess
import sys

import pytest
import torch
import yaml
from conftest import FILLER, TOPICS, make_tiny_bert


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def deterministic_bert(tmp_path_factory):
    # Dropout off: the two processes cannot share one dropout stream with a single process, so both views are the
    # same here and the comparison isolates the gathering and the gradient bookkeeping.
    return make_tiny_bert(tmp_path_factory.mktemp("bert0"), vocab=FILLER + [w for t in TOPICS for w in t],
                          dropout=0.0)


def one_step(recipe, out, nproc):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if nproc == 1:
        cmd = [sys.executable, "-m", "mixcse", "train", str(recipe), f"output_dir={out}"]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
               f"--master_port={free_port()}", "--master_addr=127.0.0.1", "-m", "mixcse", "train", str(recipe),
               f"output_dir={out}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("model in ") == 1, proc.stdout  # one report per run, not one per rank
    state = torch.load(out / "checkpoint/state.pt", weights_only=False)
    loss = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if "loss" in line][0]
    return state, loss


@pytest.mark.parametrize("loss_name,mini_batch_size", [("mixcse", None), ("simcse", None), ("mixcse", 4)])
def test_two_gloo_processes_equal_one_process(deterministic_bert, synthetic_data, tmp_path, loss_name,
                                              mini_batch_size):
    """With ``mini_batch_size`` both runs take the cached step: each rank encodes its 8 sentences in chunks of 4 and
    takes the loss over all 16 sentences' embeddings, and must equal one process doing the same over its 16 (the
    same chunks, so the same float rounding; tests/test_cached_step.py ties the cached step to the one-pass one)."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({
        "model": str(deterministic_bert), "train_file": str(synthetic_data["corpus"]), "output_dir": "unused",
        "loss": loss_name, "batch_size": 16, "max_steps": 1, "log_steps": 1, "select_on": "none",
        "max_grad_norm": None, "num_threads": 1, "max_seq_length": 16, "mini_batch_size": mini_batch_size,
        # the cached variant also reads a memory-mapped corpus: rank 0 builds it, rank 1 waits, then opens it
        **({"corpus": "disk", "corpus_cache_dir": str(tmp_path / "cache")} if mini_batch_size else {})}))
    ddp, ddp_loss = one_step(recipe, tmp_path / "ddp", 2)
    single, single_loss = one_step(recipe, tmp_path / "single", 1)
    assert len(ddp["rng"]) == 2 and len(single["rng"]) == 1  # one RNG state per rank
    assert not torch.equal(ddp["rng"][0]["torch"], ddp["rng"][1]["torch"])  # ranks draw different dropout masks
    assert torch.equal(ddp["rng"][0]["torch"], single["rng"][0]["torch"])  # rank 0 keeps the run's seed stream
    assert abs(single_loss["loss"] - ddp_loss["loss"]) <= 1e-6
    assert abs(single_loss["mix_cos" if loss_name == "mixcse" else "neg_cos"]
               - ddp_loss["mix_cos" if loss_name == "mixcse" else "neg_cos"]) <= 1e-6
    # After one AdamW step exp_avg = (1 - beta1) * gradient: compare the gradients themselves.
    compared = 0
    for key, s in single["optimizer"]["state"].items():
        g_single = s["exp_avg"] / 0.1
        g_ddp = ddp["optimizer"]["state"][key]["exp_avg"] / 0.1
        assert torch.allclose(g_single, g_ddp, atol=1e-6, rtol=1e-4), key
        compared += 1
    assert compared > 10
    for name, w in single["model"].items():
        assert torch.allclose(w, ddp["model"][name], atol=1e-6), name


def torchrun(args, env_threads="1", check=True):
    env = {**os.environ, "OMP_NUM_THREADS": env_threads}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
           "--master_addr=127.0.0.1", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_ddp_resume_after_a_kill_equals_an_uninterrupted_run(tiny_bert, synthetic_data, tmp_path):
    """Two ranks, dropout on (a per-rank RNG stream each): killed in step 5 after the checkpoint at step 4, resumed
    with --resume, the run ends bit-identical to one never interrupted."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({
        "model": str(tiny_bert), "train_file": str(synthetic_data["corpus"]), "output_dir": "unused",
        "loss": "mixcse", "batch_size": 16, "max_steps": 6, "save_steps": 2, "log_steps": 1, "select_on": "none",
        "num_threads": 1, "max_seq_length": 16}))
    full, killed = tmp_path / "full", tmp_path / "killed"
    torchrun(["-m", "mixcse", "train", str(recipe), f"output_dir={full}"])
    dies = os.path.join(os.path.dirname(__file__), "fixtures", "ddp_dies_at_step.py")
    proc = torchrun([dies, str(recipe), str(killed), "5"], check=False)
    assert proc.returncode != 0
    assert torch.load(killed / "checkpoint/state.pt", weights_only=False)["state"]["step"] == 4
    torchrun(["-m", "mixcse", "train", str(recipe), f"output_dir={killed}", "--resume"])

    a = torch.load(full / "checkpoint/state.pt", weights_only=False)
    b = torch.load(killed / "checkpoint/state.pt", weights_only=False)
    assert a["state"]["step"] == b["state"]["step"] == 6
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    for k, v in a["optimizer"]["state"].items():
        assert torch.equal(v["exp_avg_sq"], b["optimizer"]["state"][k]["exp_avg_sq"]), k

    def losses(p):
        return [json.loads(line)["loss"] for line in (p / "metrics.jsonl").read_text().splitlines()]
    assert losses(full) == losses(killed)  # every step logged once, with the same loss
