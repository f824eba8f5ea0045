#!/usr/bin/env bash
# The commit's build (.device/bins.tar.xz: scripts/gpu/build.sh's groundrl): the GRPO step of
# configs/3b-1gpu.toml (steps 2-10, scripts/gpu/train-runs.sh) with the vision tower frozen (the
# config) and trained (model.freeze_vision=false), one run each; then `bench train` of the 3B shape
# (8 rows x 1,390 tokens) with the tower's blocks recomputed and its first 20 kept. $OUT gets
# table-tower.txt, bench-train.txt and raw-tower.tgz.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/train-runs.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-swiglu-division-tower
rm -rf "$work"
mkdir -p "$out" "$work/new"
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
train_runs_setup "$work/new/groundrl" "$work" || exit 1
train_run frozen "$work/new/groundrl"
train_run tower "$work/new/groundrl" model.freeze_vision=false
cat "$work/raw/exits.txt" > "$out/table-tower.txt"
python3 scripts/bench/step_table.py "$work/raw" frozen tower >> "$out/table-tower.txt"
cat "$out/table-tower.txt"
timeout 120 "$work/new/groundrl" bench train --preset 3b --dtype bf16 --device cuda --rows 8 --checkpoint tower \
  --keep-tower-blocks 20 > "$out/bench-train.txt" 2>&1
tail -3 "$out/bench-train.txt" | cut -c1-400
tar czf "$out/raw-tower.tgz" -C "$work" raw
