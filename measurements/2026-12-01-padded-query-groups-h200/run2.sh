#!/usr/bin/env bash
# Fewer than 8 query heads per KV head through groundrl's decoding attention (zero queries pad the
# group to the kernels' 8): the commit's build (.device/bins.tar.xz) against ce4c993's
# (.device/bins-ce4c993.tar.xz), in one call: the tensor crate's `fused::`, `rollout::` and `qwen`
# tests built for CUDA; `bench rollout` 8 x 8 of the Qwen3-VL 4B shape (4 query heads per KV head,
# grid 1x46x80) two rounds alternating, of the Qwen2.5-VL 7B shape (7 per KV head) one round, of
# the 3B shape (8, unchanged) one round; one profiled Qwen3-VL 4B generation of the new build per
# decoding step. $OUT gets tests.txt, rollout-qwen3-4b.txt, rollout-7b.txt, rollout-3b.txt and
# kernels-decode-qwen3-4b.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-padded-groups
rm -rf "$work"
mkdir -p "$out" "$work/new" "$work/before"
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
tar xJf .device/bins-ce4c993.tar.xz -C "$work/before" || exit 1
for filter in fused:: rollout:: qwen; do
  (cd crates/groundrl-tensor && timeout 200 "$work/new/groundrl-tensor-tests" "$filter" --test-threads 1) >> "$out/tests.txt" 2>&1
  echo "tests $filter rc=$?" >> "$out/tests.txt"
done
grep -E "test result|FAILED|panicked|rc=" "$out/tests.txt"
"$work/new/groundrl" model init --preset qwen3-4b --dtype bf16 --device cuda --out "$work/qwen3-4b" > /dev/null || exit 1
rollout_ab "$out/rollout-qwen3-4b.txt" "$work/qwen3-4b" "$work/before/groundrl" "$work/new/groundrl" 2 \
  --prompts 8 --n 8 --grid 1x46x80
timeout 120 "$work/new/groundrl" bench rollout --model "$work/qwen3-4b" --dtype bf16 --device cuda --prompts 8 --n 8 \
  --grid 1x46x80 --repeats 1 --profile "$work/profile" > /dev/null 2> "$work/profile.log"
python3 scripts/bench/kernel_table.py "$work/profile/generate.json" --top 30 --per 127 \
  --subtract "$work/profile/prefill.json" > "$out/kernels-decode-qwen3-4b.txt" 2>&1
head -16 "$out/kernels-decode-qwen3-4b.txt" | cut -c1-140
rm -rf "$work/qwen3-4b"
"$work/new/groundrl" model init --preset 7b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/7b" > /dev/null || exit 1
rollout_ab "$out/rollout-7b.txt" "$work/7b" "$work/before/groundrl" "$work/new/groundrl" 1
rm -rf "$work/7b"
rollout_ab "$out/rollout-3b.txt" "$work/3b" "$work/before/groundrl" "$work/new/groundrl" 1
