#!/usr/bin/env bash
# The checks to run whenever a CUDA machine is at hand (one command, about 5 minutes on an H200; no downloads):
#   1. end to end on CUDA: the CPU recipe (stand-in backbone, [CLS]+MLP, precision auto = bf16 on the GPU) for
#      MixCSE and SimCSE, 1,500 steps (one pass over 96k sentences), STS-B dev every 125 steps;
#   2. fp16 with the gradient scaler, 100 steps.
# usage: benchmarks/gpu_check.sh DATA OUT
#   DATA holds mini-wiki-mlm/ (the stand-in), corpus.txt.gz (sentences) and downstream/STS/STSBenchmark/;
#   OUT receives the runs' summaries and metrics, and the log.
set -uo pipefail
DATA=${1:?usage: benchmarks/gpu_check.sh DATA OUT}
OUT=${2:?usage: benchmarks/gpu_check.sh DATA OUT}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY=${PYTHON:-python3}
nvidia-smi -L
$PY -c "import torch, transformers; print('torch', torch.__version__, '| transformers', transformers.__version__, '|', torch.cuda.get_device_name(0))"

train() {  # name, extra key=value overrides...
    local name=$1; shift
    local t0=$SECONDS
    timeout 200 $PY -m mixcse train recipes/cpu/mixcse-mini.yaml model="$DATA/mini-wiki-mlm" \
        train_file="$DATA/corpus.txt.gz" data_dir="$DATA/downstream" output_dir="/tmp/gpu-check-$name" "$@" \
        && cp "/tmp/gpu-check-$name/summary.json" "$OUT/summary_$name.json"
    echo "$name: exit $?, $((SECONDS - t0)) s wall"
}
echo "== 1. end to end, precision auto (bf16 on CUDA)"
train mixcse loss=mixcse max_steps=1500 log_steps=25
train simcse loss=simcse max_steps=1500 log_steps=25
cp /tmp/gpu-check-mixcse/metrics.jsonl "$OUT/metrics_mixcse.jsonl" 2>/dev/null
echo "== 2. fp16 + GradScaler"
train fp16 loss=mixcse precision=fp16 max_steps=100 eval_steps=100 log_steps=10
