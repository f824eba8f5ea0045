#!/usr/bin/env bash
# Every step's period in one profiled generation (`bench rollout` 8 x 8 of the 3B shape) of "base"
# (.device/bins-final.tar.xz), "head" (bins-head) and "inputs" (bins-inputs), as run1.sh's, with
# periods.py: whether the steps between replays of runs of steps account for the difference between
# the profiled median step and `bench rollout`'s step. $OUT gets periods-all.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-head3
rm -rf "$work"
mkdir -p "$out"
names=(base head inputs)
unpack_builds "$work" base:bins-final head:bins-head inputs:bins-inputs || exit 1
builds=()
for name in "${names[@]}"; do builds+=("$work/$name/groundrl"); done
"${builds[0]}" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model-3b" > /dev/null || exit 1
rollout_profile "$out/periods.txt" "$work/model-3b" "${builds[@]}" "${builds[@]}"
for name in "${names[@]}"; do
  python3 measurements/2026-12-03-head-product-h200/periods.py "$work/profile-$name/generate.json" >> "$out/periods-all.txt" 2>&1
done
cat "$out/periods.txt" "$out/periods-all.txt"
