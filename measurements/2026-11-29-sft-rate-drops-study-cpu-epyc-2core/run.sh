#!/usr/bin/env bash
# The SFT-against-GRPO study on the CPU with the baselines' rate drops (commit 4c9ddce; the same
# command as 2026-11-29-sft-vs-grpo-study-cpu-epyc-2core plus sft.rate_drops=2, which the study sets
# itself from a68dca3): the warm-up's first two plateaus (3 validations without gain, every 50 steps
# on 300 tasks) lower its rate tenfold (1e-3, 1e-4, 1e-5), the third stops it; then 150 GRPO steps of
# 32 prompts on the same 4,800 tasks. Three seeds side by side, release build.
set -euo pipefail
out=${1:-/work/study3/run}
eval "$(scripts/setup-libtorch.sh)"
cargo build --release -p groundrl
start=$(date +%s)
target/release/groundrl demo --study --out "$out" --set-tasks 300 trainer.held_out_freq=200 sft.rate_drops=2 > output.txt 2>&1
echo "exit $? wall $(( $(date +%s) - start )) s" > wall.txt
