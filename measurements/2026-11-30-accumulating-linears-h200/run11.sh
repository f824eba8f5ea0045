#!/usr/bin/env bash
# The build of 4f76772 (the decoding attention's part merge in two shared helpers): the fused
# kernels' CUDA tests and `bench rollout` at 8 x 8 (medians of 5). The binaries of
# scripts/gpu/build.sh packed in .device/bins.tar.xz. $OUT gets table.txt and gpu-tests.txt.
set -uo pipefail
source scripts/gpu/env.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-parts-helpers
rm -rf "$work"
mkdir -p "$out" "$work/bin"
tar xJf .device/bins.tar.xz -C "$work/bin" || exit 1
b=$work/bin
timeout 100 "$b/groundrl-tensor-tests" fused:: --test-threads=1 --nocapture > "$out/gpu-tests.txt" 2>&1
"$b/groundrl" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model" > /dev/null || exit 1
timeout 80 "$b/groundrl" bench rollout --model "$work/model" --dtype bf16 --device cuda --prompts 8 --n 8 \
  --bandwidth-gbs 4800 --repeats 5 > "$out/table.txt" 2> "$work/bench-rollout.log"
cat "$out/table.txt"
grep -E "^test |test result|kernel" "$out/gpu-tests.txt"
