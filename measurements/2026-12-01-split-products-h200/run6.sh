#!/usr/bin/env bash
# More rounds in one call: `bench rollout` 8 x 8 of the 3B shape, five rounds alternating c0815ee's
# build (.device/bins-c0815ee.tar.xz) and the commit's (.device/bins.tar.xz), then two rounds of the
# Qwen3-VL 4B shape (random weights, `model init --preset qwen3-4b`, grid 1x46x80 as
# scripts/gpu/qwen3_vl.sh), whose decoding step takes the same path. $OUT gets rollout-3b.txt and
# rollout-qwen3-4b.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-split-products-rounds
rm -rf "$work"
mkdir -p "$out" "$work/before" "$work/new"
tar xJf .device/bins-c0815ee.tar.xz -C "$work/before" || exit 1
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
rollout_ab "$out/rollout-3b.txt" "$work/model-3b" "$work/before/groundrl" "$work/new/groundrl" 5
"$work/new/groundrl" model init --preset qwen3-4b --dtype bf16 --device cuda --out "$work/model-qwen3-4b" > /dev/null || exit 1
rollout_ab "$out/rollout-qwen3-4b.txt" "$work/model-qwen3-4b" "$work/before/groundrl" "$work/new/groundrl" 2 \
  --prompts 8 --n 8 --grid 1x46x80
