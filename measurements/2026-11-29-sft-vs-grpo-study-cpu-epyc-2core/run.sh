#!/usr/bin/env bash
# The SFT-against-GRPO study on the CPU (configs/demo-cpu.toml with the study's overrides: a warm-up
# validated every 50 steps on 300 tasks, stopped after 3 validations without gain, capped at 1,200
# steps; then 150 GRPO steps of 32 prompts on the same 4,800 tasks), three seeds side by side, 500
# in-distribution test tasks and 300 of each other set, curves every 200 steps. Release build.
set -euo pipefail
out=${1:-/work/study/run}
eval "$(scripts/setup-libtorch.sh)"
cargo build --release -p groundrl
start=$(date +%s)
target/release/groundrl demo --study --out "$out" --set-tasks 300 trainer.held_out_freq=200 > output.txt 2>&1
echo "exit $? wall $(( $(date +%s) - start )) s" > wall.txt
