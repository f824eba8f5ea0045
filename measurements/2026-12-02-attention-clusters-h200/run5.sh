#!/usr/bin/env bash
# Three builds in one call: "deep" (run2's), "ahead" (run4's) and "resident" (deep, each prompt-kernel
# stage's mask read during the stage before it, and the per-row kernel after a prompt kernel with two
# stages a warp instead of three, whose 64 KiB of shared memory fit on an SM beside a Hopper prompt
# block; .device/bins-resident.tar.xz, its tests .device/tests-resident.tar.xz): resident's tensor
# and training crates' CUDA tests; `bench rollout` 8 x 8 of the 3B shape, three rounds in turn; one
# profiled generation of each with the period of a layer and of a step and each layer's kernels; the
# GRPO step of configs/3b-1gpu.toml (steps 2-10, scripts/gpu/train-runs.sh) with deep and resident,
# one run each. $OUT gets tensor-tests.txt, train-tests.txt, rollout.txt, periods.txt, timeline.txt,
# table.txt and raw.tgz.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
source scripts/gpu/train-runs.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-resident
rm -rf "$work"
mkdir -p "$out" "$work/tests"
names=(deep ahead resident)
for build in deep:bins-deep2 ahead:bins-ahead resident:bins-resident; do
  mkdir -p "$work/${build%%:*}"
  tar xJf ".device/${build#*:}.tar.xz" -C "$work/${build%%:*}" || exit 1
done
tar xJf .device/tests-resident.tar.xz -C "$work/tests" || exit 1
(cd crates/groundrl-tensor && timeout 150 "$work/tests/groundrl-tensor-tests" --test-threads 4) > "$out/tensor-tests.txt" 2>&1
echo "rc=$?" >> "$out/tensor-tests.txt"
(cd crates/groundrl-train && timeout 200 "$work/tests/groundrl-train-tests" --test-threads 8) > "$out/train-tests.txt" 2>&1
echo "rc=$?" >> "$out/train-tests.txt"
grep -hE "^test result|^rc=|FAILED|panicked|largest error" "$out/tensor-tests.txt" "$out/train-tests.txt" | head -12
grep -q "^rc=0" "$out/tensor-tests.txt" || exit 1  # no timing of a build whose tests fail
builds=()
for build in "${names[@]}"; do builds+=("$work/$build/groundrl"); done
rollout_rounds "$out/rollout.txt" "$work/model-3b" 3 "" "${builds[@]}"
rollout_profile "$out/periods.txt" "$work/model-3b" "${builds[@]}"
cat "$out/periods.txt"
for build in "${names[@]}"; do
  echo "== $build" >> "$out/timeline.txt"
  python3 measurements/2026-12-02-split-product-h200/layer_timeline.py "$work/profile-$build/generate.json" >> "$out/timeline.txt"
done
cat "$out/timeline.txt"
train_runs_setup "$work/resident/groundrl" "$work" || exit 1
for build in deep resident; do train_run "${build}1" "$work/$build/groundrl"; done
cat "$work/raw/exits.txt" > "$out/table.txt"
python3 scripts/bench/step_table.py "$work/raw" deep1 resident1 >> "$out/table.txt"
cat "$out/table.txt"
tar czf "$out/raw.tgz" -C "$work" raw
