#!/usr/bin/env bash
# Seven stages in flight for the gate|up kernel (four before; its shared memory 216 KB)
# against 40c0a61's build (.device/bins-pdl.tar.xz), in one call: `bench rollout`
# 8 x 8 of the 3B shape, four rounds alternating; two profiled generations of each build,
# alternating, with the period of a layer and of a step (../2026-12-01-dependent-launch-h200/
# layer_period.py) and the new build's kernel table. .device/bins.tar.xz: the new build's binary.
# $OUT gets rollout-3b.txt, periods.txt and kernels-decode-8x8.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
periods=measurements/2026-12-01-dependent-launch-h200/layer_period.py
work=/tmp/groundrl-gate-up-stages
rm -rf "$work"
mkdir -p "$out" "$work/new" "$work/before"
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
tar xJf .device/bins-pdl.tar.xz -C "$work/before" || exit 1
rollout_ab "$out/rollout-3b.txt" "$work/model-3b" "$work/before/groundrl" "$work/new/groundrl" 4
for i in 1 2; do
  for build in before new; do
    timeout 90 "$work/$build/groundrl" bench rollout --model "$work/model-3b" --dtype bf16 --device cuda \
      --prompts 8 --n 8 --repeats 1 --profile "$work/profile-$build-$i" > /dev/null 2> "$work/profile.log"
    echo "== $build, profile $i" >> "$out/periods.txt"
    python3 "$periods" "$work/profile-$build-$i/generate.json" >> "$out/periods.txt"
  done
done
cat "$out/periods.txt"
python3 scripts/bench/kernel_table.py "$work/profile-new-1/generate.json" --top 30 --per 127 \
  --subtract "$work/profile-new-1/prefill.json" > "$out/kernels-decode-8x8.txt" 2>&1
head -22 "$out/kernels-decode-8x8.txt" | cut -c1-120
