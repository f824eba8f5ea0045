#!/usr/bin/env bash
# e693da9's kernels ("fit": 07ee36d's build, .device/bins-fit.tar.xz) beside "overlap" (run5's
# "resident", and the Hopper prompt kernel letting the per-row kernel start only once each of its
# blocks has waited for the rotation, the per-row kernel then reading each row's own columns while
# the prompt kernel runs and waiting for it only before the fold; .device/bins-overlap.tar.xz, its
# tests .device/tests-overlap.tar.xz), in one call: overlap's tensor and training crates' CUDA tests;
# one profiled generation of each (`bench rollout` 8 x 8 of the 3B shape) with the period of a layer
# and of a step and each layer's kernels; `bench rollout` 8 x 8, two rounds of both in turn; then
# the GRPO step of configs/3b-1gpu.toml (steps 2-10, scripts/gpu/train-runs.sh) with overlap, one
# run. $OUT gets tensor-tests.txt, train-tests.txt, periods.txt, timeline.txt, rollout.txt, table.txt
# and raw.tgz.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
source scripts/gpu/train-runs.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-overlap
rm -rf "$work"
mkdir -p "$out"
names=(fit overlap)
unpack_builds "$work" fit:bins-fit overlap:bins-overlap || exit 1
cuda_tests "$out" "$work" tests-overlap || exit 1  # no timing of a build whose tests fail
builds=("$work/fit/groundrl" "$work/overlap/groundrl")
"${builds[1]}" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model-3b" > /dev/null || exit 1
rollout_profile "$out/periods.txt" "$work/model-3b" "${builds[@]}"
cat "$out/periods.txt"
for build in "${names[@]}"; do
  echo "== $build" >> "$out/timeline.txt"
  python3 measurements/2026-12-02-split-product-h200/layer_timeline.py "$work/profile-$build/generate.json" >> "$out/timeline.txt"
done
cat "$out/timeline.txt"
rollout_rounds "$out/rollout.txt" "$work/model-3b" 2 "" "${builds[@]}"
train_runs_setup "$work/overlap/groundrl" "$work" || exit 1
train_run overlap1 "$work/overlap/groundrl"
cat "$work/raw/exits.txt" > "$out/table.txt"
python3 scripts/bench/step_table.py "$work/raw" overlap1 >> "$out/table.txt"
cat "$out/table.txt"
tar czf "$out/raw.tgz" -C "$work" raw
