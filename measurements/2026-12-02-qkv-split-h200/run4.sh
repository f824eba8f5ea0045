#!/usr/bin/env bash
# run2's "chain" (.device/bins-chain.tar.xz) beside two builds, in one run:
# - "kept": chain, and the prompt kernel copying two stages of keys and values before its wait
#   (early2.patch; without run3's fold: bins-kept, tests-kept);
# - "late": kept, and the per-row attention kernel letting the output projection's kernel start only
#   once it has read the prompt kernel's parts (late.patch; bins-late, tests-late).
# The tensor and training crates' CUDA tests of kept and late; one profiled generation of each build
# (`bench rollout` 8 x 8 of the 3B shape) with the period of a layer and of a step and each layer's
# kernels; `bench rollout` 8 x 8, one untimed run, then three rounds of the three in turn; 32 x 8 once
# for chain and kept; the GRPO step of `configs/3b-1gpu.toml` (10 steps, scripts/gpu/train-runs.sh)
# of chain and kept. $OUT gets tests.tgz, periods.txt, timeline.txt, rollout.txt, rollout-32.txt,
# table.txt and raw.tgz.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
source scripts/gpu/train-runs.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-kept
rm -rf "$work"
mkdir -p "$out"
names=(chain kept late)
unpack_builds "$work" chain:bins-chain kept:bins-kept late:bins-late || exit 1
for build in kept late; do
  echo "== tests of $build"
  mkdir -p "$work/tests-out/$build"
  rm -rf "$work/tests"
  cuda_tests "$work/tests-out/$build" "$work" "tests-$build"
done
tar czf "$out/tests.tgz" -C "$work" tests-out
grep -q "^rc=0" "$work/tests-out/kept/tensor-tests.txt" || exit 1  # no timing of a build whose tests fail
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
rollout_rounds "$out/rollout-32.txt" "$work/model-3b" 1 "--prompts 32 --n 8" "${builds[0]}" "${builds[1]}"
train_runs_setup "${builds[0]}" "$work/train" || exit 1
for build in chain kept; do train_run "grpo-$build" "$work/$build/groundrl"; done
cat "$work/train/raw/exits.txt" > "$out/table.txt"
python3 scripts/bench/step_table.py "$work/train/raw" grpo-chain grpo-kept >> "$out/table.txt"
cat "$out/table.txt"
tar czf "$out/raw.tgz" -C "$work/train" raw
