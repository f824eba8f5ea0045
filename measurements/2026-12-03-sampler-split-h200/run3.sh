#!/usr/bin/env bash
# "base" (d89eb95's build, .device/bins-base.tar.xz) beside "final" (runs, and graphs captured in the
# capturing thread's mode; bins-final, tests-final). The tensor and training crates' CUDA tests of
# final (as many test threads as before: two tests capture graphs); `bench rollout` 8 x 8 and 32 x 8
# of the 3B shape, one untimed run, then three rounds of the two in turn each; the GRPO step of
# `configs/3b-1gpu.toml` (10 steps, scripts/gpu/train-runs.sh) of both. $OUT gets tests.tgz,
# rollout.txt, rollout-32.txt, table.txt and raw.tgz.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
source scripts/gpu/train-runs.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-final
rm -rf "$work"
mkdir -p "$out"
names=(base final)
unpack_builds "$work" base:bins-base final:bins-final || exit 1
mkdir -p "$work/tests-out/final"
cuda_tests "$work/tests-out/final" "$work" tests-final
tar czf "$out/tests.tgz" -C "$work" tests-out
grep -q "^rc=0" "$work/tests-out/final/tensor-tests.txt" || exit 1  # no timing of a build whose tests fail
builds=()
for build in "${names[@]}"; do builds+=("$work/$build/groundrl"); done
"${builds[0]}" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model-3b" > /dev/null || exit 1
# One untimed run first: the first run of a call is its slowest.
timeout 90 "${builds[0]}" bench rollout --model "$work/model-3b" --dtype bf16 --device cuda --prompts 8 --n 8 > /dev/null 2>&1
rollout_rounds "$out/rollout.txt" "$work/model-3b" 3 "" "${builds[@]}"
rollout_rounds "$out/rollout-32.txt" "$work/model-3b" 3 "--prompts 32 --n 8" "${builds[@]}"
train_runs_setup "${builds[0]}" "$work/train" || exit 1
for build in "${names[@]}"; do train_run "grpo-$build" "$work/$build/groundrl"; done
cat "$work/train/raw/exits.txt" > "$out/table.txt"
python3 scripts/bench/step_table.py "$work/train/raw" grpo-base grpo-final >> "$out/table.txt"
cat "$out/table.txt"
tar czf "$out/raw.tgz" -C "$work/train" raw
