#!/usr/bin/env bash
# The GRPO step of configs/3b-1gpu.toml (steps 2-10, scripts/gpu/train-runs.sh) with this build's
# binary (.device/bins.tar.xz, scripts/gpu/build.sh's) and the build before the kernel's
# (.device/bins-main.tar.xz, product code of 0c693c3), alternating, two runs each. $OUT gets
# table.txt and raw.tgz.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/train-runs.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-gate-up-step
rm -rf "$work"
mkdir -p "$out" "$work/new" "$work/main"
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
tar xJf .device/bins-main.tar.xz -C "$work/main" || exit 1
train_runs_setup "$work/new/groundrl" "$work" || exit 1
train_run main1 "$work/main/groundrl"
train_run new1 "$work/new/groundrl"
train_run main2 "$work/main/groundrl"
train_run new2 "$work/new/groundrl"
cat "$work/raw/exits.txt" > "$out/table.txt"
python3 scripts/bench/step_table.py "$work/raw" main1 new1 main2 new2 >> "$out/table.txt"
cat "$out/table.txt"
tar czf "$out/raw.tgz" -C "$work" raw
