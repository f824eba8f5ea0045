#!/usr/bin/env bash
# The CPU study with the shaped click reward (click + GUI-G2's Gaussian, configs/rewards/synthetic-click.toml)
# in place of the demo's click reward alone: the same seeds, tasks and supervised baselines as the
# 2026-11-30 CPU study (the warm-up does not read the reward, and the CPU runs are deterministic);
# only the GRPO arm's reward differs. Three seeds side by side, release build.
set -euo pipefail
out=${1:-/work/study5/run}
root=${ROOT:-/work/main}
cd "$root"
eval "$(scripts/setup-libtorch.sh)"
cargo build --release -p groundrl
start=$(date +%s)
target/release/groundrl demo --study --out "$out" --set-tasks 300 trainer.held_out_freq=200 \
  reward.spec="$root/configs/rewards/synthetic-click.toml" > /work/study5/output.txt 2>&1
echo "exit $? wall $(( $(date +%s) - start )) s" > /work/study5/wall.txt
