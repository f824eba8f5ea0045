#!/usr/bin/env bash
# The CPU study again (the command of 2026-11-29-sft-rate-drops-study-cpu-epyc-2core, whose
# sft.rate_drops=2 the study sets itself since a68dca3) on a build with the detection set (0546e3c):
# the same seeds and tasks, so every click set must repeat that run's numbers (the CPU runs are
# deterministic), and the detection set is new. Three seeds side by side, release build.
set -euo pipefail
out=${1:-/work/study4/run}
root=${ROOT:-/work/main}
cd "$root"
eval "$(scripts/setup-libtorch.sh)"
cargo build --release -p groundrl
start=$(date +%s)
target/release/groundrl demo --study --out "$out" --set-tasks 300 trainer.held_out_freq=200 > /work/study4/output.txt 2>&1
echo "exit $? wall $(( $(date +%s) - start )) s" > /work/study4/wall.txt
