#!/usr/bin/env bash
# The per-row kernel's fold of the prompt kernel's parts (and the merge of split parts) with several
# parts' loads in flight (unrolled, no branch) against the build before it (c0815ee's product code),
# in one call: the tensor crate's `fused::` and `rollout::` tests built for CUDA, `bench attention
# --samples 8` profiled for both builds, `bench rollout` 8 x 8 three times each, alternating, and one
# profiled generation of the new build per decoding step. .device/bins.tar.xz: scripts/gpu/build.sh's
# binaries of this build; .device/bins-c0815ee.tar.xz: the build before. $OUT gets tests.txt,
# attention-*.txt, rollout.txt and kernels-decode-8x8.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-parts-fold
rm -rf "$work"
mkdir -p "$out" "$work/new" "$work/before"
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
tar xJf .device/bins-c0815ee.tar.xz -C "$work/before" || exit 1
for filter in fused:: rollout::; do
  (cd crates/groundrl-tensor && timeout 200 "$work/new/groundrl-tensor-tests" "$filter" --test-threads 1) >> "$out/tests.txt" 2>&1
  echo "tests $filter rc=$?" >> "$out/tests.txt"
done
grep -E "test result|FAILED|panicked|rc=" "$out/tests.txt"
for build in before new; do
  timeout 90 "$work/$build/groundrl" bench attention --samples 8 --splits 0 --profile "$work/attention-$build" \
    > "$out/attention-$build.txt" 2> "$work/attention.log"
  echo "== $build" >> "$out/attention-kernels.txt"
  python3 scripts/bench/kernel_table.py "$work/attention-$build/kernel-0.json" --top 4 >> "$out/attention-kernels.txt" 2>&1
done
cut -c1-150 "$out/attention-kernels.txt"
rollout_ab "$out/rollout.txt" "$work/model" "$work/before/groundrl" "$work/new/groundrl" 3
timeout 90 "$work/new/groundrl" bench rollout --model "$work/model" --dtype bf16 --device cuda --prompts 8 --n 8 \
  --repeats 1 --profile "$work/profile" > /dev/null 2> "$work/profile.log"
python3 scripts/bench/kernel_table.py "$work/profile/generate.json" --top 30 --per 127 \
  --subtract "$work/profile/prefill.json" > "$out/kernels-decode-8x8.txt" 2>&1
head -24 "$out/kernels-decode-8x8.txt" | cut -c1-150
