#!/usr/bin/env bash
# The same two builds as run1.sh, longer: `bench rollout` 8 x 8 of the 3B shape, five rounds
# alternating; then two profiled generations of each build, alternating, and from each trace the
# period of a layer (one gate|up kernel's start to the next) and of a decoding step (sampler to
# sampler) by layer_period.py. $OUT gets rollout-3b.txt and periods.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
here=measurements/2026-12-01-dependent-launch-h200
work=/tmp/groundrl-dependent-launch
rm -rf "$work"
mkdir -p "$out" "$work/new" "$work/before"
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
tar xJf .device/bins-5204505.tar.xz -C "$work/before" || exit 1
rollout_ab "$out/rollout-3b.txt" "$work/model-3b" "$work/before/groundrl" "$work/new/groundrl" 5
for i in 1 2; do
  for build in before new; do
    timeout 90 "$work/$build/groundrl" bench rollout --model "$work/model-3b" --dtype bf16 --device cuda \
      --prompts 8 --n 8 --repeats 1 --profile "$work/profile-$build-$i" > /dev/null 2> "$work/profile.log"
    echo "== $build, profile $i" >> "$out/periods.txt"
    python3 "$here/layer_period.py" "$work/profile-$build-$i/generate.json" >> "$out/periods.txt"
  done
done
cat "$out/periods.txt"
