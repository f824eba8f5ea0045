#!/usr/bin/env bash
# Three builds in one call: "fit" (07ee36d's build, the kernels of e693da9: down_proj's split product
# copies its weights only after waiting for the gate|up kernel; .device/bins-fit.tar.xz), "deep" (its
# first twelve stages' weights copied before that wait; .device/bins-deep2.tar.xz) and "clusters"
# (deep, and the decoding attention with shared prompts in one cluster kernel; .device/bins-clusters.tar.xz,
# its tests .device/tests-clusters.tar.xz): the clusters build's tensor and training crates' CUDA
# tests; `bench rollout` 8 x 8 of the 3B shape, three rounds in turn; one profiled generation of each
# with the period of a layer and of a step and each layer's kernels (layer_timeline.py of
# 2026-12-02-split-product-h200). $OUT gets tensor-tests.txt, train-tests.txt, rollout.txt,
# periods.txt and timeline.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-clusters
rm -rf "$work"
mkdir -p "$out" "$work/tests"
for build in fit:bins-fit deep:bins-deep2 clusters:bins-clusters; do
  mkdir -p "$work/${build%%:*}"
  tar xJf ".device/${build#*:}.tar.xz" -C "$work/${build%%:*}" || exit 1
done
tar xJf .device/tests-clusters.tar.xz -C "$work/tests" || exit 1
(cd crates/groundrl-tensor && timeout 150 "$work/tests/groundrl-tensor-tests" --test-threads 4) > "$out/tensor-tests.txt" 2>&1
echo "rc=$?" >> "$out/tensor-tests.txt"
(cd crates/groundrl-train && timeout 200 "$work/tests/groundrl-train-tests" --test-threads 8) > "$out/train-tests.txt" 2>&1
echo "rc=$?" >> "$out/train-tests.txt"
grep -hE "^test result|^rc=|FAILED|panicked|largest error" "$out/tensor-tests.txt" "$out/train-tests.txt" | head -12
grep -q "^rc=0" "$out/tensor-tests.txt" || exit 1  # no timing of a build whose tests fail
builds=("$work/fit/groundrl" "$work/deep/groundrl" "$work/clusters/groundrl")
rollout_rounds "$out/rollout.txt" "$work/model-3b" 3 "" "${builds[@]}"
rollout_profile "$out/periods.txt" "$work/model-3b" "${builds[@]}"
cat "$out/periods.txt"
for build in fit deep clusters; do
  echo "== $build" >> "$out/timeline.txt"
  python3 measurements/2026-12-02-split-product-h200/layer_timeline.py "$work/profile-$build/generate.json" >> "$out/timeline.txt"
done
cat "$out/timeline.txt"
