#!/usr/bin/env bash
# "base" (.device/bins-final.tar.xz) beside "inputs" (bins-inputs), as in run1.sh: `bench rollout`
# 8 x 8 of the 3B shape, one untimed run, then five rounds of the two in turn; 32 x 8, two rounds;
# the GRPO step of `configs/3b-1gpu.toml` (10 steps, scripts/gpu/train-runs.sh) of both. $OUT gets
# rollout.txt, rollout-32.txt, table.txt and raw.tgz.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
source scripts/gpu/train-runs.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-head2
rm -rf "$work"
mkdir -p "$out"
names=(base inputs)
unpack_builds "$work" base:bins-final inputs:bins-inputs || exit 1
builds=()
for name in "${names[@]}"; do builds+=("$work/$name/groundrl"); done
"${builds[0]}" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model-3b" > /dev/null || exit 1
timeout 90 "${builds[0]}" bench rollout --model "$work/model-3b" --dtype bf16 --device cuda --prompts 8 --n 8 > /dev/null 2>&1
rollout_rounds "$out/rollout.txt" "$work/model-3b" 5 "" "${builds[@]}"
rollout_rounds "$out/rollout-32.txt" "$work/model-3b" 2 "--prompts 32 --n 8" "${builds[@]}"
train_runs_setup "${builds[0]}" "$work/train" || exit 1
for name in "${names[@]}"; do train_run "grpo-$name" "$work/$name/groundrl"; done
cat "$work/train/raw/exits.txt" > "$out/table.txt"
python3 scripts/bench/step_table.py "$work/train/raw" grpo-base grpo-inputs >> "$out/table.txt"
cat "$out/table.txt"
tar czf "$out/raw.tgz" -C "$work/train" raw
