#!/usr/bin/env bash
# The shared prompt columns' attention through csrc/prompt_attention.cu (warp-group products) against
# the build before it (the mma.sync prompt kernel), in one call: the tensor crate's `fused::` tests
# built for CUDA (the decoding attention's among them), `bench attention` with 8 samples a prompt for
# both builds, profiled (device times per kernel), `bench rollout` 8 x 8 three times each,
# alternating, and one profiled generation of the new build per decoding step.
# .device/bins.tar.xz: scripts/gpu/build.sh's binaries of this build; .device/bins-de8fc19.tar.xz:
# the build before. $OUT gets tests.txt, attention-*.txt, rollout.txt and kernels-decode-8x8.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-prompt-attention
rm -rf "$work"
mkdir -p "$out" "$work/new" "$work/before"
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
tar xJf .device/bins-de8fc19.tar.xz -C "$work/before" || exit 1
(cd crates/groundrl-tensor && timeout 150 "$work/new/groundrl-tensor-tests" fused:: --test-threads 1) > "$out/tests.txt" 2>&1
echo "tests rc=$?" >> "$out/tests.txt"
grep -E "test result|FAILED|panicked|rc=" "$out/tests.txt"
for build in before new; do
  timeout 90 "$work/$build/groundrl" bench attention --samples 8 --splits 0,4,8,16 \
    --profile "$work/attention-$build" > "$out/attention-$build.txt" 2> "$work/attention.log"
  for f in "$work/attention-$build"/kernel-*.json; do
    echo "== $(basename "$f")" >> "$out/attention-kernels-$build.txt"
    python3 scripts/bench/kernel_table.py "$f" --top 4 >> "$out/attention-kernels-$build.txt" 2>&1
  done
done
grep -h "" "$out"/attention-before.txt "$out"/attention-new.txt | cut -c1-200
grep -hE "^==|prompt|decode_attention" "$out"/attention-kernels-*.txt | cut -c1-150 | head -40
rollout_ab "$out/rollout.txt" "$work/model" "$work/before/groundrl" "$work/new/groundrl" 3
timeout 90 "$work/new/groundrl" bench rollout --model "$work/model" --dtype bf16 --device cuda --prompts 8 --n 8 \
  --repeats 1 --profile "$work/profile" > /dev/null 2> "$work/profile.log"
python3 scripts/bench/kernel_table.py "$work/profile/generate.json" --top 30 --per 127 \
  --subtract "$work/profile/prefill.json" > "$out/kernels-decode-8x8.txt" 2>&1
head -24 "$out/kernels-decode-8x8.txt" | cut -c1-150
