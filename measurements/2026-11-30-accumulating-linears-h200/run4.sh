#!/usr/bin/env bash
# The build in .device/ (run4/: d0b5eb5; run7/: 4370237, see README.md): the fused kernels' CUDA
# tests; `configs/3b-1gpu.toml` three times (steps 2-10) and twice with the
# tower trained, alternating; `groundrl bench train` (8 rows x 1,390 tokens, the whole 3B model
# trained) with the tower's blocks recomputed and its first 20 kept, and with the whole tower
# recomputed. Binaries from scripts/gpu/build.sh in .device/. $OUT gets table.txt, gpu-tests.txt and
# raw.tgz.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/train-runs.sh
bin=$PWD/.device/groundrl
out=${OUT:-/tmp/out}
work=/tmp/groundrl-final-step
rm -rf "$work"
mkdir -p "$out"
timeout 150 .device/groundrl-tensor-tests fused:: --test-threads=1 --nocapture > "$out/gpu-tests.txt" 2>&1
train_runs_setup "$bin" "$work" || exit 1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$work/raw/gpu.txt"
train_run frozen1 "$bin"
train_run tower1 "$bin" model.freeze_vision=false
train_run frozen2 "$bin"
train_run tower2 "$bin" model.freeze_vision=false
train_run frozen3 "$bin"
for kept in 20 0; do
  timeout 100 "$bin" bench train --preset 3b --dtype bf16 --device cuda --rows 8 --checkpoint tower \
    --keep-tower-blocks $kept >> "$work/raw/bench_train.jsonl" 2> "$work/raw/bench-train-$kept.log"
done
cat "$work/raw/gpu.txt" "$work/raw/exits.txt" > "$out/table.txt"
python3 scripts/bench/step_table.py "$work/raw" frozen1 tower1 frozen2 tower2 frozen3 >> "$out/table.txt"
python3 - "$work/raw/bench_train.jsonl" <<'PY' >> "$out/table.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"bench train --checkpoint {r['checkpoint']} --keep-tower-blocks {r['keep_tower_blocks']}: {r['ms']:.1f} ms, "
          f"{r['mfu_model_flops']:.1%} MFU by model FLOPs, {r['device_memory_gib']:.1f} GiB")
PY
cat "$out/table.txt"
grep -E "^test |test result|differ|gradient" "$out/gpu-tests.txt"
tar czf "$out/raw.tgz" -C "$work" raw
