#!/usr/bin/env bash
# e21b60e's build ("base", .device/bins-base.tar.xz) beside three builds of the q|k|v split product,
# in one run:
# - "qkv": q|k|v through the Hopper split product (3 slices of k, launched to start during the norm
#   before it), its slices summed with the bias by the rotation kernel (bins-qkv, tests-qkv);
# - "nowait": qkv, and the split products issuing every stage's products without waiting for the
#   stage before when all stages fit in shared memory (nowait.patch; bins-nowait);
# - "pipe": nowait, and the Hopper prompt attention kernel issuing each stage's scores during the
#   stage before it (pipeline.patch; bins-pipe, tests-pipe).
# The tensor and training crates' CUDA tests of qkv and pipe (whose kernels include nowait's); one profiled generation of each build (`bench
# rollout` 8 x 8 of the 3B shape) with the period of a layer and of a step and each layer's kernels;
# `bench rollout` 8 x 8, two rounds of the four in turn. $OUT gets tests.tgz (each build's test
# output), periods.txt, timeline.txt and rollout.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-qkv
rm -rf "$work"
mkdir -p "$out"
names=(base qkv nowait pipe)
unpack_builds "$work" base:bins-base qkv:bins-qkv nowait:bins-nowait pipe:bins-pipe || exit 1
for build in qkv pipe; do
  echo "== tests of $build"
  mkdir -p "$work/tests-out/$build"
  rm -rf "$work/tests"
  cuda_tests "$work/tests-out/$build" "$work" "tests-$build"
done
tar czf "$out/tests.tgz" -C "$work" tests-out
grep -q "^rc=0" "$work/tests-out/qkv/tensor-tests.txt" || exit 1  # no timing of a build whose tests fail
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
rollout_rounds "$out/rollout.txt" "$work/model-3b" 2 "" "${builds[@]}"
