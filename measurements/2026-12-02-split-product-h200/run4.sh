#!/usr/bin/env bash
# 07ee36d's build ("fit": 12 stages, a slice's weights copied before the wait for the kernel ahead
# only when all of them fit in the stages; .device/bins-fit.tar.xz, its tests
# .device/tests-fit.tar.xz) beside run3.sh's "deep" (12 stages, the first 12 stages' weights always
# copied before that wait; .device/bins-deep.tar.xz) and 3a380d9's build ("before",
# .device/bins-base.tar.xz), in one call: the new build's tensor and training crates' CUDA tests;
# `bench rollout` 8 x 8 of the 3B shape, three rounds in turn; one profiled generation of each with
# the period of a layer and of a step and each layer's kernels (layer_timeline.py), and the kernel
# tables of before and fit; then the GRPO step of configs/3b-1gpu.toml (steps 2-10,
# scripts/gpu/train-runs.sh) with before and fit, one run each. $OUT gets tensor-tests.txt,
# train-tests.txt, rollout-fit.txt, periods-fit.txt, timeline-fit.txt, kernels-before.txt,
# kernels-fit.txt, table.txt and raw.tgz.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
source scripts/gpu/train-runs.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-split-fit
here=measurements/2026-12-02-split-product-h200
rm -rf "$work"
mkdir -p "$out" "$work/tests"
for build in fit:bins-fit before:bins-base deep:bins-deep; do
  mkdir -p "$work/${build%%:*}"
  tar xJf ".device/${build#*:}.tar.xz" -C "$work/${build%%:*}" || exit 1
done
tar xJf .device/tests-fit.tar.xz -C "$work/tests" || exit 1
(cd crates/groundrl-tensor && timeout 200 "$work/tests/groundrl-tensor-tests" --test-threads 4) > "$out/tensor-tests.txt" 2>&1
echo "rc=$?" >> "$out/tensor-tests.txt"
(cd crates/groundrl-train && timeout 200 "$work/tests/groundrl-train-tests" --test-threads 8) > "$out/train-tests.txt" 2>&1
echo "rc=$?" >> "$out/train-tests.txt"
grep -hE "^test result|^rc=|FAILED|panicked|largest error" "$out/tensor-tests.txt" "$out/train-tests.txt" | head -12
builds=("$work/before/groundrl" "$work/deep/groundrl" "$work/fit/groundrl")
rollout_rounds "$out/rollout-fit.txt" "$work/model-3b" 3 "" "${builds[@]}"
rollout_profile "$out/periods-fit.txt" "$work/model-3b" "${builds[@]}"
cat "$out/periods-fit.txt"
for build in before deep fit; do
  echo "== $build" >> "$out/timeline-fit.txt"
  python3 "$here/layer_timeline.py" "$work/profile-$build/generate.json" >> "$out/timeline-fit.txt"
done
cat "$out/timeline-fit.txt"
for build in before fit; do
  python3 scripts/bench/kernel_table.py "$work/profile-$build/generate.json" --top 30 --per 127 \
    --subtract "$work/profile-$build/prefill.json" > "$out/kernels-$build.txt" 2>&1
done
train_runs_setup "$work/fit/groundrl" "$work" || exit 1
for build in before fit; do train_run "${build}1" "$work/$build/groundrl"; done
cat "$work/raw/exits.txt" > "$out/table.txt"
python3 scripts/bench/step_table.py "$work/raw" before1 fit1 >> "$out/table.txt"
cat "$out/table.txt"
tar czf "$out/raw.tgz" -C "$work" raw
