#!/usr/bin/env bash
# The step with the tower trained, profiled (build of d0b5eb5 in .device/): `scripts/gpu/step-profile.sh`
# with RUNS=trained STEPS=4 PROMPTS=8 (step 3 profiled). $OUT gets the update's and rollout's kernel
# tables and the summary; logs and records in raw.tgz.
set -uo pipefail
out=${OUT:-/tmp/out}
RUNS=trained STEPS=4 PROMPTS=8 LIMIT_S=150 BENCH_LIMIT_S=60 WORK=/tmp/groundrl-profile-trained \
  OUT=/tmp/groundrl-profile-trained-out bash scripts/gpu/step-profile.sh > /tmp/groundrl-profile-trained.txt 2>&1
cp /tmp/groundrl-profile-trained-out/kernels-trained-update.txt /tmp/groundrl-profile-trained-out/step-profile.txt "$out/"
cat "$out/step-profile.txt"
head -n 45 "$out/kernels-trained-update.txt"
tar czf "$out/raw.tgz" -C /tmp groundrl-profile-trained.txt groundrl-profile-trained-out/step-profile.tgz \
  groundrl-profile-trained-out/kernels-trained-rollout.txt
