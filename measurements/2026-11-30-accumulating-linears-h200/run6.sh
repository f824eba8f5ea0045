#!/usr/bin/env bash
# The build of 4370237 (the towers' varlen attention, pinned pixels, AdamW four values a thread)
# against d0b5eb5's, in one call: the CUDA tests of the changed code (fused kernels, attention,
# uploads, the optimizer); `configs/3b-1gpu.toml` alternating the builds, frozen tower (before,
# after, before, after) then tower trained (the same); with the new build `bench rollout` at 8 x 8
# (medians of 5) and `bench train --checkpoint tower --keep-tower-blocks 20`. Binaries packed in
# .device/bins.tar.xz (groundrl-before, groundrl, groundrl-tensor-tests, groundrl-train-tests).
# $OUT gets table.txt, gpu-tests.txt and raw.tgz.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/train-runs.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-tower-varlen
rm -rf "$work"
mkdir -p "$out" "$work/bin"
tar xJf .device/bins.tar.xz -C "$work/bin" || exit 1
b=$work/bin
timeout 120 "$b/groundrl-tensor-tests" fused:: attention:: upload:: --test-threads=1 --nocapture > "$out/gpu-tests.txt" 2>&1
timeout 120 "$b/groundrl-train-tests" optim:: --test-threads=1 --nocapture >> "$out/gpu-tests.txt" 2>&1
train_runs_setup "$b/groundrl" "$work" || exit 1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$work/raw/gpu.txt"
train_run before1 "$b/groundrl-before"
train_run after1 "$b/groundrl"
train_run before2 "$b/groundrl-before"
train_run after2 "$b/groundrl"
train_run tower-before1 "$b/groundrl-before" model.freeze_vision=false
train_run tower-after1 "$b/groundrl" model.freeze_vision=false
train_run tower-before2 "$b/groundrl-before" model.freeze_vision=false
train_run tower-after2 "$b/groundrl" model.freeze_vision=false
timeout 80 "$b/groundrl" bench rollout --model "$work/model" --dtype bf16 --device cuda --prompts 8 --n 8 \
  --bandwidth-gbs 4800 --repeats 5 > "$work/raw/bench_rollout.jsonl" 2> "$work/raw/bench-rollout.log"
timeout 100 "$b/groundrl" bench train --preset 3b --dtype bf16 --device cuda --rows 8 --checkpoint tower \
  --keep-tower-blocks 20 > "$work/raw/bench_train.jsonl" 2> "$work/raw/bench-train.log"
cat "$work/raw/gpu.txt" "$work/raw/exits.txt" > "$out/table.txt"
python3 scripts/bench/step_table.py "$work/raw" before1 after1 before2 after2 tower-before1 tower-after1 \
  tower-before2 tower-after2 >> "$out/table.txt"
python3 - "$work/raw" <<'PY' >> "$out/table.txt"
import json, sys
raw = sys.argv[1]
for line in open(f"{raw}/bench_rollout.jsonl"):
    r = json.loads(line)
    print(f"bench rollout {r['prompts']} x {r['n']}: {r['generated_tokens_per_s']:.0f} tokens/s, decode step "
          f"{r['decode_step_ms']:.3f} ms, {r['roofline_fraction']:.1%} of the roofline, prefill {r['prefill_seconds']:.3f} s, "
          f"whole {r['seconds']:.3f} s (medians of {r['repeats']})")
for line in open(f"{raw}/bench_train.jsonl"):
    r = json.loads(line)
    print(f"bench train --checkpoint {r['checkpoint']} --keep-tower-blocks {r['keep_tower_blocks']}: {r['ms']:.1f} ms, "
          f"{r['mfu_model_flops']:.1%} MFU by model FLOPs, {r['device_memory_gib']:.1f} GiB")
PY
cat "$out/table.txt"
grep -E "^test |test result|differ|gradient|varlen" "$out/gpu-tests.txt"
tar czf "$out/raw.tgz" -C "$work" raw
