#!/usr/bin/env bash
# run4's "kept" (9c1a00a's kernels, .device/bins-kept.tar.xz) beside two builds of it whose split
# product of at most 8 stages a block (o_proj at the 3B shape) copies fewer of its weights before its
# wait: half ("ohalf", o-half.patch; bins-ohalf) and a quarter ("oquarter", o-quarter.patch;
# bins-oquarter). Experiments only (the patches pick o_proj by its stage count), so no tests: one
# profiled generation of each build (`bench rollout` 8 x 8 of the 3B shape) with the period of a
# layer and of a step and each layer's kernels; `bench rollout` 8 x 8, one untimed run, then three
# rounds of the three in turn. $OUT gets periods.txt, timeline.txt and rollout.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-oearly
rm -rf "$work"
mkdir -p "$out"
names=(kept ohalf oquarter)
unpack_builds "$work" kept:bins-kept ohalf:bins-ohalf oquarter:bins-oquarter || exit 1
builds=()
for build in "${names[@]}"; do builds+=("$work/$build/groundrl"); done
"${builds[0]}" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model-3b" > /dev/null || exit 1
rollout_profile "$out/periods.txt" "$work/model-3b" "${builds[@]}"
cat "$out/periods.txt"
for build in "${names[@]}"; do
  echo "== $build" >> "$out/timeline.txt"
  python3 measurements/2026-12-02-split-product-h200/layer_timeline.py "$work/profile-$build/generate.json" >> "$out/timeline.txt"
done
cat "$out/timeline.txt"
timeout 90 "${builds[0]}" bench rollout --model "$work/model-3b" --dtype bf16 --device cuda --prompts 8 --n 8 > /dev/null 2>&1
rollout_rounds "$out/rollout.txt" "$work/model-3b" 3 "" "${builds[@]}"
