#!/usr/bin/env bash
# The trainer's rollouts with and without the split products on one host: scripts/gpu/step-profile.sh
# (frozen-tower run only, 3 steps, step 3 profiled, `bench rollout` at 8 x 8 only) for c0815ee's build
# (.device/bins-c0815ee.tar.xz), the commit's (.device/bins.tar.xz), and c0815ee's again. $OUT gets,
# for each (before, new, before-again), step-profile-*.txt and kernels-*-rollout.txt.
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/split-builds/before /tmp/split-builds/new
tar xJf .device/bins-c0815ee.tar.xz -C /tmp/split-builds/before || exit 1
tar xJf .device/bins.tar.xz -C /tmp/split-builds/new || exit 1
for run in before new before-again; do
  build=${run%-again}
  BIN=/tmp/split-builds/$build/groundrl RUNS=frozen STEPS=3 PROFILE_STEP=3 PROMPTS=8 LIMIT_S=150 \
    WORK=/tmp/split-profile-$run OUT=/tmp/split-profile-$run/out bash scripts/gpu/step-profile.sh > /dev/null 2>&1
  cp /tmp/split-profile-$run/out/step-profile.txt "$out/step-profile-$run.txt"
  cp /tmp/split-profile-$run/out/kernels-frozen-rollout.txt "$out/kernels-$run-rollout.txt"
  echo "== $run"; head -1 "$out/kernels-$run-rollout.txt" | sed 's/.*json: //'
  grep -E "GPU idle" "$out/kernels-$run-rollout.txt"
  grep -E "^\| (frozen|8 x 8)" "$out/step-profile-$run.txt"
done
