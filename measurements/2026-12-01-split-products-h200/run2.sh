#!/usr/bin/env bash
# The split products with the residual add and norm in one kernel (the commit adding this folder)
# against the build before it (c0815ee's product code, .device/bins-c0815ee.tar.xz), in one call: the
# tensor crate's `fused::` and `rollout::` tests built for CUDA, `bench rollout` 8 x 8 three times
# each, alternating, and one profiled generation of the new build per decoding step.
# .device/bins.tar.xz: scripts/gpu/build.sh's binaries of the new build. $OUT gets tests.txt,
# rollout.txt and kernels-decode-8x8.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-split-products
rm -rf "$work"
mkdir -p "$out" "$work/new" "$work/before"
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
tar xJf .device/bins-c0815ee.tar.xz -C "$work/before" || exit 1
for filter in fused:: rollout:: qwen; do
  (cd crates/groundrl-tensor && timeout 200 "$work/new/groundrl-tensor-tests" "$filter" --test-threads 1) >> "$out/tests.txt" 2>&1
  echo "tests $filter rc=$?" >> "$out/tests.txt"
done
grep -E "test result|FAILED|panicked|rc=|differ from addmm" "$out/tests.txt"
rollout_ab "$out/rollout.txt" "$work/model" "$work/before/groundrl" "$work/new/groundrl" 3
timeout 90 "$work/new/groundrl" bench rollout --model "$work/model" --dtype bf16 --device cuda --prompts 8 --n 8 \
  --repeats 1 --profile "$work/profile" > /dev/null 2> "$work/profile.log"
python3 scripts/bench/kernel_table.py "$work/profile/generate.json" --top 30 --per 127 \
  --subtract "$work/profile/prefill.json" > "$out/kernels-decode-8x8.txt" 2>&1
head -24 "$out/kernels-decode-8x8.txt" | cut -c1-150
