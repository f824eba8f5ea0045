#!/usr/bin/env bash
# "base" (d89eb95's build, .device/bins-base.tar.xz) beside "final" (bins-final, run3's and run4's):
# `bench rollout` 8 x 8 of the 3B shape, one untimed run, then eight rounds of the two in turn. $OUT
# gets rollout.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-final
rm -rf "$work"
mkdir -p "$out"
unpack_builds "$work" base:bins-base final:bins-final || exit 1
base="$work/base/groundrl" final="$work/final/groundrl"
"$base" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model-3b" > /dev/null || exit 1
timeout 90 "$base" bench rollout --model "$work/model-3b" --dtype bf16 --device cuda --prompts 8 --n 8 > /dev/null 2>&1
rollout_rounds "$out/rollout.txt" "$work/model-3b" 8 "" "$base" "$final"
