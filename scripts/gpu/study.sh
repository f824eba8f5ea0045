#!/usr/bin/env bash
# The GPU machine's run of `groundrl demo --gpu --study` (what GRPO adds beyond supervised fine-tuning
# run until it stops improving; docs/learning.md): 3 seeds at once on one GPU, 1,000 in-distribution
# held-out tasks, 500 of each out-of-distribution set, with the overrides in $STUDY_OVERRIDES (none by
# default). Prints the demo's per-seed lines and its table, and copies the summary and each seed's
# warm-up log, step records and config under $OUT, with the first lines of each log.
# It expects the GPU build at .device/groundrl (scripts/gpu/build.sh). Usage on the GPU machine:
# [STUDY_OVERRIDES="..."] [STUDY_TIMEOUT=570] bash scripts/gpu/study.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
parts=study
source "$root/scripts/gpu/session.sh"
study=$work/study
rm -rf "$study"
echo "== study: groundrl demo --gpu --study ${STUDY_OVERRIDES:-}"
start=$SECONDS
# shellcheck disable=SC2086 # the overrides are words
(cd "$work" && timeout "${STUDY_TIMEOUT:-570}" "$bin" demo --gpu --study --out "$study" ${STUDY_OVERRIDES:-}) \
  > "$out/study_output.txt" 2>&1
echo "exit $? after $((SECONDS - start)) s"
grep -E '^(seed|\||mean|demo)' "$out/study_output.txt"
cp "$study/summary.json" "$out/study_summary.json" 2>/dev/null
for seed in 0 1 2; do
  for f in sft.jsonl metrics.jsonl config.toml; do
    cp "$study/seed-$seed/$f" "$out/study_seed-${seed}_$f" 2>/dev/null
  done
  grep -E 'warm-up|held-out|step [0-9]+:' "$study/seed-$seed.log" 2>/dev/null | head -60 > "$out/study_seed-$seed.log"
done
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
