#!/usr/bin/env bash
# The build of the review fixes (the in-place gradient written to the accumulator's own leaf, not in
# create_graph passes; no varlen call over no segment): the fused kernels' and the attention's CUDA
# tests, and `configs/3b-1gpu.toml` twice and once with the tower trained (steps 2-10). The binaries
# of scripts/gpu/build.sh packed in .device/bins.tar.xz. $OUT gets table.txt, gpu-tests.txt and
# raw.tgz.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/train-runs.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-review-fixes
rm -rf "$work"
mkdir -p "$out" "$work/bin"
tar xJf .device/bins.tar.xz -C "$work/bin" || exit 1
b=$work/bin
timeout 100 "$b/groundrl-tensor-tests" fused:: attention:: --test-threads=1 --nocapture > "$out/gpu-tests.txt" 2>&1
train_runs_setup "$b/groundrl" "$work" || exit 1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$work/raw/gpu.txt"
train_run frozen1 "$b/groundrl"
train_run tower "$b/groundrl" model.freeze_vision=false
train_run frozen2 "$b/groundrl"
cat "$work/raw/gpu.txt" "$work/raw/exits.txt" > "$out/table.txt"
python3 scripts/bench/step_table.py "$work/raw" frozen1 tower frozen2 >> "$out/table.txt"
cat "$out/table.txt"
grep -E "^test |test result|differ|varlen" "$out/gpu-tests.txt"
tar czf "$out/raw.tgz" -C "$work" raw
