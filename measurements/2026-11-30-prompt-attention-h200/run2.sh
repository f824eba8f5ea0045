#!/usr/bin/env bash
# The Hopper kernels launched early (programmatic dependent launch: the prompt columns' attention
# copies its keys and values while the rotation runs, the gate|up product its first weights while
# RMSNorm runs) against the build without it, in one call: the tensor crate's `fused::` and
# `rollout::` tests built for CUDA, `bench rollout` 8 x 8 three times each, alternating, and one
# profiled generation of the new build per decoding step.
# .device/bins.tar.xz: scripts/gpu/build.sh's binaries of this build; .device/bins-74fd688.tar.xz:
# the build before. $OUT gets tests.txt, rollout.txt and kernels-decode-8x8.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-early-launch
rm -rf "$work"
mkdir -p "$out" "$work/new" "$work/before"
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
tar xJf .device/bins-74fd688.tar.xz -C "$work/before" || exit 1
for filter in fused:: rollout::; do
  (cd crates/groundrl-tensor && timeout 200 "$work/new/groundrl-tensor-tests" "$filter" --test-threads 1) >> "$out/tests.txt" 2>&1
  echo "tests $filter rc=$?" >> "$out/tests.txt"
done
grep -E "test result|FAILED|panicked|rc=" "$out/tests.txt"
rollout_ab "$out/rollout.txt" "$work/model" "$work/before/groundrl" "$work/new/groundrl" 3
timeout 90 "$work/new/groundrl" bench rollout --model "$work/model" --dtype bf16 --device cuda --prompts 8 --n 8 \
  --repeats 1 --profile "$work/profile" > /dev/null 2> "$work/profile.log"
python3 scripts/bench/kernel_table.py "$work/profile/generate.json" --top 30 --per 127 \
  --subtract "$work/profile/prefill.json" > "$out/kernels-decode-8x8.txt" 2>&1
head -24 "$out/kernels-decode-8x8.txt" | cut -c1-150
