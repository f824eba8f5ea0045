#!/usr/bin/env bash
# The rotation and the two residual-add-and-norm kernels of a decoding layer launched to start early
# after the cuBLAS products before them, waiting at their start (.device/bins.tar.xz:
# scripts/gpu/build.sh's binaries of 7e4aeeb with early-norms.patch) against 7e4aeeb's
# build (.device/bins-7e4aeeb.tar.xz), in one call: the tensor crate's `fused::`, `rollout::` and
# `qwen` tests built for CUDA; `bench rollout` 8 x 8 of the 3B shape, five rounds alternating; two
# profiled generations of each, alternating, and from each trace the period of a layer and of a
# decoding step (../2026-12-01-dependent-launch-h200/layer_period.py). $OUT gets tests.txt,
# rollout-3b.txt and periods.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-early-norms
rm -rf "$work"
mkdir -p "$out" "$work/new" "$work/before"
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
tar xJf .device/bins-7e4aeeb.tar.xz -C "$work/before" || exit 1
for filter in fused:: rollout:: qwen; do
  (cd crates/groundrl-tensor && timeout 150 "$work/new/groundrl-tensor-tests" "$filter" --test-threads 4) >> "$out/tests.txt" 2>&1
  echo "tests $filter rc=$?" >> "$out/tests.txt"
done
grep -E "test result|FAILED|panicked|rc=" "$out/tests.txt"
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
