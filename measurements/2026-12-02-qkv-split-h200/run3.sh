#!/usr/bin/env bash
# run2's "chain" (.device/bins-chain.tar.xz) beside two builds, in one run:
# - "fold": chain, and the per-row attention kernel reading the prompt kernel's parts eight at a time,
#   every load of a group issued before any is used (bins-fold, tests-fold);
# - "both": fold, and the prompt kernel copying two stages of keys and values before its wait instead
#   of up to four, so that the queries, copied after it, land sooner (early2.patch; bins-both,
#   tests-both).
# The tensor and training crates' CUDA tests of fold and both; one profiled generation of each build
# (`bench rollout` 8 x 8 of the 3B shape) with the period of a layer and of a step and each layer's
# kernels; `bench rollout` 8 x 8, one untimed run, then three rounds of the three in turn; the GRPO step of
# `configs/3b-1gpu.toml` (10 steps, scripts/gpu/train-runs.sh) of each. $OUT gets tests.tgz,
# periods.txt, timeline.txt, rollout.txt, table.txt and raw.tgz.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
source scripts/gpu/train-runs.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-fold
rm -rf "$work"
mkdir -p "$out"
names=(chain fold both)
unpack_builds "$work" chain:bins-chain fold:bins-fold both:bins-both || exit 1
for build in fold both; do
  echo "== tests of $build"
  mkdir -p "$work/tests-out/$build"
  rm -rf "$work/tests"
  cuda_tests "$work/tests-out/$build" "$work" "tests-$build"
done
tar czf "$out/tests.tgz" -C "$work" tests-out
grep -q "^rc=0" "$work/tests-out/fold/tensor-tests.txt" || exit 1  # no timing of a build whose tests fail
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
# One untimed run first: the first run of run2's rounds was its slowest.
timeout 90 "${builds[0]}" bench rollout --model "$work/model-3b" --dtype bf16 --device cuda --prompts 8 --n 8 > /dev/null 2>&1
rollout_rounds "$out/rollout.txt" "$work/model-3b" 3 "" "${builds[@]}"
train_runs_setup "${builds[0]}" "$work" || exit 1
for build in "${names[@]}"; do train_run "$build" "$work/$build/groundrl"; done
cat "$work/raw/exits.txt" > "$out/table.txt"
python3 scripts/bench/step_table.py "$work/raw" "${names[@]}" >> "$out/table.txt"
cat "$out/table.txt"
tar czf "$out/raw.tgz" -C "$work" raw
