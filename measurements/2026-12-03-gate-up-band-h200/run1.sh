#!/usr/bin/env bash
# "base" (b7c345e's build, .device/bins-ahead.tar.xz) beside "band" (the gate|up kernel's blocks
# taking 84 rows each on the H200's 132 SMs, where they took 88 on 126; bins-band, tests-band). The
# tensor and training crates' CUDA tests of band; one profiled generation of each (`bench rollout`
# 8 x 8 of the 3B shape): the period of a layer and of a step, each layer's kernels; `bench rollout`
# 8 x 8, one untimed run, then five rounds of the two in turn. $OUT gets tests.tgz, periods.txt,
# timeline.txt and rollout.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-band
rm -rf "$work"
mkdir -p "$out"
names=(base band)
unpack_builds "$work" base:bins-ahead band:bins-band || exit 1
mkdir -p "$work/tests-out/band"
cuda_tests "$work/tests-out/band" "$work" tests-band
tar czf "$out/tests.tgz" -C "$work" tests-out
grep -q "^rc=0" "$work/tests-out/band/tensor-tests.txt" || exit 1  # no timing of a build whose tests fail
builds=()
for build in "${names[@]}"; do builds+=("$work/$build/groundrl"); done
"${builds[0]}" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model-3b" > /dev/null || exit 1
rollout_profile "$out/periods.txt" "$work/model-3b" "${builds[@]}"
for build in "${names[@]}"; do
  echo "== $build" >> "$out/timeline.txt"
  python3 measurements/2026-12-02-split-product-h200/layer_timeline.py "$work/profile-$build/generate.json" >> "$out/timeline.txt"
done
cat "$out/periods.txt" "$out/timeline.txt"
# One untimed run first: the first run of a call is its slowest.
timeout 90 "${builds[0]}" bench rollout --model "$work/model-3b" --dtype bf16 --device cuda --prompts 8 --n 8 > /dev/null 2>&1
rollout_rounds "$out/rollout.txt" "$work/model-3b" 5 "" "${builds[@]}"
