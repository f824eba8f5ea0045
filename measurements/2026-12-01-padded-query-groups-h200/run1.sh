#!/usr/bin/env bash
# Where the Qwen3-VL 4B shape's decoding step (random weights, grid 1x46x80, 8 x 8) spends its time
# with ce4c993's build (.device/bins-ce4c993.tar.xz), before the padded groups: one profiled generation, its kernels less the
# prefill's, per decoding step. $OUT gets kernels-decode-qwen3-4b.txt.
set -uo pipefail
source scripts/gpu/env.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-qwen3-4b-profile
rm -rf "$work"
mkdir -p "$out" "$work/new"
tar xJf .device/bins-ce4c993.tar.xz -C "$work/new" || exit 1
"$work/new/groundrl" model init --preset qwen3-4b --dtype bf16 --device cuda --out "$work/model" > /dev/null || exit 1
timeout 120 "$work/new/groundrl" bench rollout --model "$work/model" --dtype bf16 --device cuda --prompts 8 --n 8 \
  --grid 1x46x80 --repeats 1 --profile "$work/profile" > "$work/bench.json" 2> "$work/profile.log" || tail -3 "$work/profile.log"
python3 scripts/bench/kernel_table.py "$work/profile/generate.json" --top 30 --per 127 \
  --subtract "$work/profile/prefill.json" > "$out/kernels-decode-qwen3-4b.txt" 2>&1
head -34 "$out/kernels-decode-qwen3-4b.txt" | cut -c1-150
