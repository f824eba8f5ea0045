#!/usr/bin/env bash
# The build with the accumulating linear projections against the build before (0c7d773), in one
# call: the fused kernels' CUDA tests of the new build; `configs/3b-1gpu.toml` at 8 x 8 with each
# build in turn (before, after, before, after; steps 2-10), then with the tower trained (before,
# after). The binaries come packed in .device/bins.tar.xz (groundrl-before, groundrl,
# groundrl-tensor-tests). $OUT gets table.txt, gpu-tests.txt and raw.tgz.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/train-runs.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-accumulating-linear
rm -rf "$work"
mkdir -p "$out" "$work/bin"
tar xJf .device/bins.tar.xz -C "$work/bin" || exit 1
timeout 150 "$work/bin/groundrl-tensor-tests" fused:: --test-threads=1 --nocapture > "$out/gpu-tests.txt" 2>&1
train_runs_setup "$work/bin/groundrl" "$work" || exit 1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$work/raw/gpu.txt"
train_run before1 "$work/bin/groundrl-before"
train_run after1 "$work/bin/groundrl"
train_run before2 "$work/bin/groundrl-before"
train_run after2 "$work/bin/groundrl"
train_run tower-before "$work/bin/groundrl-before" model.freeze_vision=false
train_run tower-after "$work/bin/groundrl" model.freeze_vision=false
cat "$work/raw/gpu.txt" "$work/raw/exits.txt" > "$out/table.txt"
python3 scripts/bench/step_table.py "$work/raw" before1 after1 before2 after2 tower-before tower-after >> "$out/table.txt"
cat "$out/table.txt"
grep -E "^test |test result|differ|gradient" "$out/gpu-tests.txt"
tar czf "$out/raw.tgz" -C "$work" raw
