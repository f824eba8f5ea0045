#!/usr/bin/env bash
# Whether the trainer's rollouts take the split products: scripts/gpu/step-profile.sh with the
# commit's build (.device/bins.tar.xz unpacked into .device/), the frozen-tower run only, 2 steps,
# step 2 profiled, then its `bench rollout` rows (PROMPTS empty keeps the default 8, 32 and 64
# prompts). $OUT gets log.txt, step-profile.txt and kernels-frozen-rollout.txt (among the script's
# other files, not kept).
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p .device "$out"
tar xJf .device/bins.tar.xz -C .device || exit 1
RUNS=frozen STEPS=2 PROFILE_STEP=2 PROMPTS="" LIMIT_S=200 bash scripts/gpu/step-profile.sh > "$out/log.txt" 2>&1
tail -5 "$out/log.txt"
grep -E "add_rms|splitK|rms_norm|badd|nvjet|gate_up" "$out/kernels-frozen-rollout.txt" | cut -c1-140
