#!/usr/bin/env bash
# A worker killed during data-parallel GRPO on the GPU machine, then a resume: the 3B shape
# (configs/3b-1gpu.toml, random weights) on two GPUs over NCCL, a checkpoint every 2 steps, and rank 1
# killed with SIGKILL in step 5 (`GROUNDRL_FAULT=step:5@1`, after the checkpoint of step 4; the
# process kills itself as an out-of-memory kill would: no destructor runs, nothing is flushed). The
# launch must stop with an error naming the rank within `distributed.timeout_s`; `--resume` must then
# finish the run from the step-4 checkpoint with each step logged once.
#
# Usage on the GPU machine (2 GPUs, the binary of scripts/gpu/build.sh in .device/):
#   bash scripts/gpu/kill-resume.sh [OVERRIDES...]
# Overrides go to the first launch (e.g. a tiny CPU model to try the script without a GPU:
# `BIN=target/release/groundrl PYTHON=... bash scripts/gpu/kill-resume.sh model.preset=tiny model.device=cpu`).
# Logs and the run's metrics go to $OUT (default /tmp/groundrl-kill).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
py=${PYTHON:-python3}
PYTHON=$py
source "$root/scripts/gpu/env.sh"
bin=${BIN:-$root/.device/groundrl}
out=${OUT:-/tmp/groundrl-kill}
work=/tmp/groundrl-kill-run
rm -rf "$work"; mkdir -p "$work" "$out"
"$bin" synth --out "$work/data" --n 60 --seed 0 --difficulty medium --prompt instruct > /dev/null
run=$work/run
o=(data.train=$work/data/samples.jsonl 'data.val=""' trainer.save_freq=2 trainer.test_freq=0 trainer.max_steps=6
   rollout.prompts_per_step=16 trainer.mini_batch_size=128 distributed.timeout_s=60 trainer.run_dir=$run "$@")

start=$(date +%s%N)
GROUNDRL_FAULT=step:5@1 timeout 400 "$bin" train configs/3b-1gpu.toml "${o[@]}" --nproc-per-node 2 > "$out/killed.log" 2>&1
status=$?
end=$(date +%s%N)
echo "killed launch: exit $status after $(( (end - start) / 1000000 )) ms"
grep -E "killed by signal|were stopped|rror" "$out/killed.log" | head -5
ls "$run/checkpoints"

start=$(date +%s%N)
timeout 300 "$bin" train --nproc-per-node 2 --resume "$run" > "$out/resumed.log" 2>&1
status=$?
end=$(date +%s%N)
echo "resume: exit $status after $(( (end - start) / 1000000 )) ms"
grep -E "finished after|rror" "$out/resumed.log" | head -3
$py - "$run" <<'PY'
import json, sys
steps = [json.loads(l)["step"] for l in open(f"{sys.argv[1]}/metrics.jsonl")]
print("steps logged:", steps, "each once:", steps == list(range(1, len(steps) + 1)))
PY
cp "$run/metrics.jsonl" "$out/metrics.jsonl"
