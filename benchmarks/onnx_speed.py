"""ONNX export of a model: speed against torch, file sizes, what int8 costs, and the full evaluation on both backends.

One process exports the model (`mixcse.export.export_onnx`, plus a per-tensor int8 graph for comparison) and, with
2 threads on every side (torch.set_num_threads(2), onnxruntime intra-op 2):

* speed: sentences/s of `encode` at batch 1 (64 sentences, one at a time) and batch 64 (256 sentences), torch fp32,
  onnx fp32, onnx int8 per channel and per tensor, interleaved rounds (order reversed every round); ratios are
  per-round ratios to the torch call of the same round, median over rounds;
* quality: cosine of each graph's embeddings to torch fp32 on the STS-B test sentences, the 7 STS tasks' average
  Spearman (mixcse's `evaluate`), MQP test pair AP (sklearn `average_precision_score` over pair cosines) and SciFact
  test nDCG@10 (mixcse's retrieval evaluation);
* `--eval`: `python -m mixcse eval EXPORTED_FOLDER [--backend onnx]` (all 14 tasks, default settings) once per
  backend: wall time, the evaluation's own phase timings, the largest STS / transfer difference.

Results are merged into benchmarks/results/onnx.json (each part replaces its own key).

    flock /work/cpu.lock python benchmarks/onnx_speed.py            # speed + quality, ~15 min on 2 cores
    flock /work/cpu.lock python benchmarks/onnx_speed.py --eval     # the two full evaluations, ~15 min
    python benchmarks/onnx_speed.py --table                         # the docs table, from onnx.json
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import (
    DOWNSTREAM,
    RESULTS,
    SHARED,
    code_version,
    interleaved,
    machine_info,
    minilm_path,
    summarise,
)

THREADS = 2
MQP = SHARED / "data" / "domain" / "medical-questions" / "pairs" / "test.tsv"
SCIFACT = SHARED / "data" / "domain" / "scifact"
OUT = RESULTS / "onnx.json"


def _encoders(folder: Path, per_tensor: Path):
    from mixcse.onnx_backend import OnnxSentenceEncoder, open_graph
    from mixcse.sentence_encoder import SentenceEncoder

    encoders = {"torch fp32": SentenceEncoder.load(folder, device="cpu"),
                "onnx fp32": SentenceEncoder.load(folder, backend="onnx", threads=THREADS),
                "onnx int8 per-channel": SentenceEncoder.load(folder, backend="onnx", precision="int8",
                                                              threads=THREADS)}
    pt = OnnxSentenceEncoder.load(folder, precision="int8", threads=THREADS)
    pt.graph = open_graph(per_tensor, THREADS)
    pt.fingerprint += "-per-tensor"
    encoders["onnx int8 per-tensor"] = pt
    return encoders


def speed(encoders: dict, sentences: list[str], rounds: int) -> dict:
    out = {}
    for batch, n in ((1, 64), (64, 256)):
        part = sentences[:n]
        times = interleaved({name: (lambda e=e: e.encode(part, batch_size=batch)) for name, e in encoders.items()},
                            repeats=rounds)
        out[f"batch_{batch}"] = {
            "sentences": n,
            "sentences_per_second": {k: round(n / summarise(v)["median"], 1) for k, v in times.items()},
            "speedup_vs_torch": {k: round(float(np.median([t / s for t, s in zip(times["torch fp32"], v)])), 2)
                                 for k, v in times.items() if k != "torch fp32"}}
    return out


def quality(encoders: dict, sentences: list[str]) -> dict:
    from sklearn.metrics import average_precision_score

    from mixcse.evaluation import evaluate

    with open(MQP, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))
    labels = np.asarray([int(r["label"]) for r in rows])
    reference = encoders["torch fp32"].encode(sentences)
    out = {}
    for name, enc in encoders.items():
        emb = enc.encode(sentences)
        cos = (emb * reference).sum(1) / np.linalg.norm(emb, axis=1) / np.linalg.norm(reference, axis=1)
        a, b = enc.encode([r["sentence1"] for r in rows]), enc.encode([r["sentence2"] for r in rows])
        pair_cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        sts = evaluate(enc, tasks="sts", data_dir=DOWNSTREAM, verbose=False)["sts"]
        retrieval = evaluate(enc, tasks="retrieval", retrieval_data=SCIFACT, verbose=False)["retrieval"]
        out[name] = {"cosine_to_torch_fp32": {"min": round(float(cos.min()), 4), "mean": round(float(cos.mean()), 4)},
                     "max_abs_diff_to_torch_fp32": float(np.abs(emb - reference).max()),
                     "sts_avg": round(sts["avg"], 2), "mqp_test_pair_ap": round(100 * average_precision_score(
                         labels, pair_cos), 2), "scifact_test_ndcg@10": round(retrieval["ndcg@10"], 2)}
        print(name, out[name], flush=True)
    return out


def full_eval(folder: Path) -> dict:
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for backend in ("torch", "onnx"):
            out = Path(tmp) / f"{backend}.json"
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "mixcse", "eval", str(folder), "--backend", backend, "--output",
                            str(out)], check=True, stdout=subprocess.DEVNULL)
            res = json.loads(out.read_text())
            runs[backend] = {"wall_seconds": round(time.perf_counter() - t0, 1),
                             "phases_seconds": res["settings"]["seconds"], "sts": res["sts"],
                             "transfer_acc": {k: v["acc"] for k, v in res["transfer"].items() if k != "avg"},
                             "transfer_avg": res["transfer"]["avg"]}
            print(backend, runs[backend]["wall_seconds"], flush=True)
    t, o = runs["torch"], runs["onnx"]
    sts_diff = max(abs(t["sts"][k]["spearman"] - o["sts"][k]["spearman"]) for k in t["sts"] if k != "avg")
    transfer_diff = max(abs(t["transfer_acc"][k] - o["transfer_acc"][k]) for k in t["transfer_acc"])
    return {"command": f"python -m mixcse eval MODEL --backend torch|onnx (all 14 tasks, default settings)",
            "runs": runs, "max_abs_diff_sts": round(sts_diff, 4), "max_abs_diff_transfer": round(transfer_diff, 4),
            "speedup_end_to_end": round(t["wall_seconds"] / o["wall_seconds"], 2),
            "speedup_encode": round(t["phases_seconds"]["encode"] / o["phases_seconds"]["encode"], 2)}


def table(record: dict) -> str:
    """The markdown table of docs/performance.md, from onnx.json."""
    lines = []
    for model, e in record["models"].items():
        if "speed" not in e:
            continue
        lines += [f"{model}, {record['threads']} threads ({record['machine']['cpu']}, {record['date'][:10]}):", "",
                  "| | file MB | batch 1: sent/s (× torch) | batch 64: sent/s (× torch) | cosine to torch min / mean "
                  "| STS avg | MQP pair AP | SciFact nDCG@10 |", "|---|---|---|---|---|---|---|---|"]
        files = {"torch fp32": "model.safetensors", "onnx fp32": "onnx/model.onnx",
                 "onnx int8 per-channel": "onnx/model_qint8.onnx",
                 "onnx int8 per-tensor": "onnx/model_qint8_per_tensor.onnx"}
        for name, q in e["quality"].items():
            cells = [name, f"{e['file_mb'][files[name]]:.1f}"]
            for b in ("batch_1", "batch_64"):
                sp = e["speed"][b]
                ratio = sp["speedup_vs_torch"].get(name)
                cells.append(f"{sp['sentences_per_second'][name]:.1f}" + (f" ({ratio:.2f}×)" if ratio else ""))
            cells += [f"{q['cosine_to_torch_fp32']['min']:.4f} / {q['cosine_to_torch_fp32']['mean']:.4f}",
                      f"{q['sts_avg']:.2f}", f"{q['mqp_test_pair_ap']:.2f}", f"{q['scifact_test_ndcg@10']:.2f}"]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="model folder (default all-MiniLM-L6-v2)")
    parser.add_argument("--name", default="all-MiniLM-L6-v2", help="its name in the JSON")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per side (default 5)")
    parser.add_argument("--eval", action="store_true", help="the two full evaluations instead of speed/quality")
    parser.add_argument("--table", action="store_true", help="print docs/performance.md's table from onnx.json")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(OUT.read_text())))
        return
    import torch

    from mixcse.evaluation.senteval import load_stsb
    from mixcse.export import export_onnx, quantize_int8

    torch.set_num_threads(THREADS)
    record = json.loads(OUT.read_text()) if OUT.exists() else {"benchmark": "onnx_speed"}
    entry = record.setdefault("models", {}).setdefault(args.name, {})
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "exported"
        t0 = time.perf_counter()
        report = export_onnx(args.model or minilm_path(), folder, quantize="int8")
        entry["export"] = {"seconds": round(time.perf_counter() - t0, 1), "inputs": report["inputs"],
                           "max_rel_diff_check": report["max_rel_diff"]}
        per_tensor = Path(tmp) / "model_qint8_per_tensor.onnx"
        quantize_int8(folder / "onnx" / "model.onnx", per_tensor, per_channel=False)
        entry["file_mb"] = {**{k: round(v / 1e6, 1) for k, v in report["files"].items()},
                            "onnx/model_qint8_per_tensor.onnx": round(per_tensor.stat().st_size / 1e6, 1),
                            "model.safetensors": round((folder / "model.safetensors").stat().st_size / 1e6, 1)}
        if args.eval:
            entry["eval"] = full_eval(folder)
        else:
            encoders = _encoders(folder, per_tensor)
            sentences = list(dict.fromkeys(load_stsb(DOWNSTREAM, "test").sentences()))
            entry["speed"] = speed(encoders, sentences, args.rounds)
            print(json.dumps(entry["speed"], indent=1), flush=True)
            entry["quality"] = quality(encoders, sentences)
            entry["quality_sentences"] = f"{len(sentences)} distinct STS-B test sentences"
    record.update(date=time.strftime("%Y-%m-%d %H:%M:%S"), code=code_version(), threads=THREADS,
                  machine=machine_info())
    entry["updated"] = record["date"]
    OUT.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
