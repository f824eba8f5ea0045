#!/usr/bin/env bash
# The build of 4293e29 (AdamW's kernels folded into one template): the optimizer's and the fused
# kernels' CUDA tests, and `configs/3b-1gpu.toml` once (steps 2-10). The binaries of
# scripts/gpu/build.sh packed in .device/bins.tar.xz. $OUT gets table.txt, gpu-tests.txt and raw.tgz.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/train-runs.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-adamw-template
rm -rf "$work"
mkdir -p "$out" "$work/bin"
tar xJf .device/bins.tar.xz -C "$work/bin" || exit 1
b=$work/bin
timeout 100 "$b/groundrl-train-tests" optim:: --test-threads=1 --nocapture > "$out/gpu-tests.txt" 2>&1
timeout 100 "$b/groundrl-tensor-tests" fused:: --test-threads=1 >> "$out/gpu-tests.txt" 2>&1
train_runs_setup "$b/groundrl" "$work" || exit 1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$work/raw/gpu.txt"
train_run frozen "$b/groundrl"
cat "$work/raw/gpu.txt" "$work/raw/exits.txt" > "$out/table.txt"
python3 scripts/bench/step_table.py "$work/raw" frozen >> "$out/table.txt"
cat "$out/table.txt"
grep -E "^test |test result|differ" "$out/gpu-tests.txt"
tar czf "$out/raw.tgz" -C "$work" raw
