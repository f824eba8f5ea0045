#!/usr/bin/env bash
# Programmatic dependent launch in the decoding step (the commit adding this folder) against the build
# before it, in one call: the tensor crate's `fused::`, `rollout::` and `qwen` tests built for CUDA;
# `bench rollout` 8 x 8 of the 3B shape, three rounds alternating; one profiled generation of the
# new build per decoding step; two rounds of the Qwen3-VL 4B shape (random weights, grid 1x46x80).
# .device/bins.tar.xz: scripts/gpu/build.sh's binaries of the new build; .device/bins-5204505.tar.xz:
# the build before (5204505's product code with ../2026-12-01-l2-prefetch-h200's patch, which launches
# nothing without its environment variables). $OUT gets tests.txt, rollout-3b.txt, kernels-decode-8x8.txt, rollout-qwen3-4b.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-dependent-launch
rm -rf "$work"
mkdir -p "$out" "$work/new" "$work/before"
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
tar xJf .device/bins-5204505.tar.xz -C "$work/before" || exit 1
for filter in fused:: rollout:: qwen; do
  (cd crates/groundrl-tensor && timeout 200 "$work/new/groundrl-tensor-tests" "$filter" --test-threads 1) >> "$out/tests.txt" 2>&1
  echo "tests $filter rc=$?" >> "$out/tests.txt"
done
grep -E "test result|FAILED|panicked|rc=" "$out/tests.txt"
rollout_ab "$out/rollout-3b.txt" "$work/model-3b" "$work/before/groundrl" "$work/new/groundrl" 3
timeout 90 "$work/new/groundrl" bench rollout --model "$work/model-3b" --dtype bf16 --device cuda --prompts 8 --n 8 \
  --repeats 1 --profile "$work/profile" > /dev/null 2> "$work/profile.log"
python3 scripts/bench/kernel_table.py "$work/profile/generate.json" --top 30 --per 127 \
  --subtract "$work/profile/prefill.json" > "$out/kernels-decode-8x8.txt" 2>&1
head -22 "$out/kernels-decode-8x8.txt" | cut -c1-120
rm -rf "$work/model-3b"
"$work/new/groundrl" model init --preset qwen3-4b --dtype bf16 --device cuda --out "$work/model-qwen3-4b" > /dev/null || exit 1
rollout_ab "$out/rollout-qwen3-4b.txt" "$work/model-qwen3-4b" "$work/before/groundrl" "$work/new/groundrl" 2 \
  --prompts 8 --n 8 --grid 1x46x80
