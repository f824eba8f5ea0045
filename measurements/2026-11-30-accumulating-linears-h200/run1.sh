#!/usr/bin/env bash
# The fused kernels' CUDA tests of the shipped build (0c7d773); cuBLASLt's algorithms for the
# decoding step's products (cublaslt_search.cu, built into .device/cublaslt-search, see README.md);
# `configs/3b-1gpu.toml` at 8 x 8 with micro-batches of 16 (the config's), 32 and 64, and with the
# tower trained. $OUT gets table.txt, gpu-tests.txt, matmuls.txt and raw.tgz.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/train-runs.sh
# cuBLAS and cuBLASLt of torch's wheels, for the search program.
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13", "lib"))'):$LD_LIBRARY_PATH
bin=$PWD/.device/groundrl
out=${OUT:-/tmp/out}
work=/tmp/groundrl-update-matmuls
rm -rf "$work"
mkdir -p "$out"
timeout 150 .device/groundrl-tensor-tests fused:: --test-threads=1 > "$out/gpu-tests.txt" 2>&1
timeout 120 .device/cublaslt-search > "$out/matmuls.txt" 2>&1
train_runs_setup "$bin" "$work" || exit 1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$work/raw/gpu.txt"
train_run micro16 "$bin"
train_run micro32 "$bin" trainer.micro_batch_size=32
train_run micro64 "$bin" trainer.micro_batch_size=64
train_run tower "$bin" model.freeze_vision=false
cat "$work/raw/gpu.txt" "$work/raw/exits.txt" > "$out/table.txt"
python3 scripts/bench/step_table.py "$work/raw" micro16 micro32 micro64 tower >> "$out/table.txt"
grep -h "gradient_checkpointing" "$work/raw"/*.log >> "$out/table.txt"
cat "$out/table.txt" "$out/matmuls.txt"
grep -E "^test |test result" "$out/gpu-tests.txt"
tar czf "$out/raw.tgz" -C "$work" raw
