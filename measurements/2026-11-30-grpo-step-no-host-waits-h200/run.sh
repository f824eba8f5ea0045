#!/usr/bin/env bash
# One H200, one call: the GPU tests of the foreach shim and of the decoding attention over shared
# prompts; `configs/3b-1gpu.toml` (micro-batches of 16) from a folder, from the preset, with the
# tower trained and with checkpointing; 32 x 8 and 64 x 8; the profiled step (update and rollout
# kernel tables, `bench rollout` at 8 x 8 and 32 x 8); `bench train`. Run from the repository root
# with the cuda build at .device/ (scripts/gpu/build.sh); raw output under $OUT.
set -uo pipefail
source scripts/gpu/env.sh
out=${OUT:-/tmp/out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpu.txt"
.device/groundrl-tensor-tests foreach decode_attention --test-threads 1 2>&1 |
  grep -E "^test |test result" | tee "$out/gpu-tests.txt"
LIMIT_S=100 OUT=$out bash scripts/gpu/start-and-batches.sh start batches > "$out/start-and-batches.log" 2>&1
RUNS=frozen STEPS=4 PROMPTS="8 32" LIMIT_S=100 OUT=$out bash scripts/gpu/step-profile.sh > "$out/step-profile.log" 2>&1
timeout 100 .device/groundrl bench train --preset 3b --dtype bf16 --device cuda --rows 8 \
  > "$out/bench_train.jsonl" 2> "$out/bench_train.log"
cat "$out/start-and-batches.txt" "$out/step-profile.txt" "$out/bench_train.jsonl"
