#!/usr/bin/env bash
# The decoding step's kernels at 8 x 8 without the prefill's: `bench rollout` (medians of 5), then one
# profiled generation whose kernel table has the profiled prefill's kernels taken away
# (scripts/bench/kernel_table.py --subtract), per decoding step (127 a generation of 128 tokens).
# The binaries of scripts/gpu/build.sh packed in .device/bins.tar.xz. $OUT gets table.txt,
# kernels-decode-8x8.txt and kernels-generate-8x8.txt (the same trace with the prefill in).
set -uo pipefail
source scripts/gpu/env.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-decode-step-kernels
rm -rf "$work"
mkdir -p "$out" "$work/bin"
tar xJf .device/bins.tar.xz -C "$work/bin" || exit 1
b=$work/bin
"$b/groundrl" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model" > /dev/null || exit 1
timeout 90 "$b/groundrl" bench rollout --model "$work/model" --dtype bf16 --device cuda --prompts 8 --n 8 \
  --bandwidth-gbs 4800 --repeats 5 > "$out/table.txt" 2> "$work/bench.log"
timeout 90 "$b/groundrl" bench rollout --model "$work/model" --dtype bf16 --device cuda --prompts 8 --n 8 \
  --repeats 1 --profile "$work/profile" > /dev/null 2> "$work/profile.log"
python3 scripts/bench/kernel_table.py "$work/profile/generate.json" --top 30 --per 127 \
  --subtract "$work/profile/prefill.json" > "$out/kernels-decode-8x8.txt" 2>&1
python3 scripts/bench/kernel_table.py "$work/profile/generate.json" --top 30 --per 127 \
  > "$out/kernels-generate-8x8.txt" 2>&1
cat "$out/table.txt"
head -40 "$out/kernels-decode-8x8.txt" | cut -c1-150
