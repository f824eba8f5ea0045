#!/usr/bin/env bash
# The decoding step of the commit adding this script (.device/bins.tar.xz: scripts/gpu/build.sh's
# binaries) against 40c0a61's (.device/bins-pdl.tar.xz), in one call: `bench rollout` 8 x 8 of the 3B
# shape, five rounds alternating; two profiled generations of each, alternating, and from each trace
# the period of a layer and of a decoding step (../2026-12-01-dependent-launch-h200/layer_period.py);
# the new build's decoding-step kernels; `bench rollout` 32 x 8, two rounds alternating. $OUT gets
# rollout-3b.txt, periods.txt, kernels-decode-8x8.txt, rollout-32x8.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-sampler-step
rm -rf "$work"
mkdir -p "$out" "$work/new" "$work/before"
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
tar xJf .device/bins-pdl.tar.xz -C "$work/before" || exit 1
rollout_ab "$out/rollout-3b.txt" "$work/model-3b" "$work/before/groundrl" "$work/new/groundrl" 5
for i in 1 2; do
  for build in before new; do
    timeout 90 "$work/$build/groundrl" bench rollout --model "$work/model-3b" --dtype bf16 --device cuda \
      --prompts 8 --n 8 --repeats 1 --profile "$work/profile-$build-$i" > /dev/null 2> "$work/profile.log"
    echo "== $build, profile $i" >> "$out/periods.txt"
    python3 measurements/2026-12-01-dependent-launch-h200/layer_period.py "$work/profile-$build-$i/generate.json" >> "$out/periods.txt"
  done
done
cat "$out/periods.txt"
python3 scripts/bench/kernel_table.py "$work/profile-new-1/generate.json" --top 30 --per 127 \
  --subtract "$work/profile-new-1/prefill.json" > "$out/kernels-decode-8x8.txt" 2>&1
head -24 "$out/kernels-decode-8x8.txt" | cut -c1-120
rollout_ab "$out/rollout-32x8.txt" "$work/model-3b" "$work/before/groundrl" "$work/new/groundrl" 2 --prompts 32 --n 8
