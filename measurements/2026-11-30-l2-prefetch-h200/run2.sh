#!/usr/bin/env bash
# As run1.sh, with the prefetch's way from GROUNDRL_L2_PREFETCH_MODE (0 bulk prefetches on the step's
# stream, 1 line prefetches on it, 2 bulk and 3 line prefetches on a side stream joined at the end of
# each layer): `bench rollout` 8 x 8 (medians of 5) for each MODE:PLAN, and the kernel tables of two
# profiled generations. $OUT gets table.txt, gpu-tests.txt and kernels-*.txt.
set -uo pipefail
source scripts/gpu/env.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-l2-prefetch
rm -rf "$work"
mkdir -p "$out" "$work/bin" "$work/raw"
tar xJf .device/bins.tar.xz -C "$work/bin" || exit 1
b=$work/bin
timeout 100 "$b/groundrl-tensor-tests" fused:: --test-threads=1 > "$out/gpu-tests.txt" 2>&1
"$b/groundrl" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model" > /dev/null || exit 1
run() {  # MODE:PLAN PROMPTS [extra bench flags]
  local mode=${1%%:*} plan=${1#*:} prompts=$2
  shift 2
  GROUNDRL_L2_PREFETCH_MODE=$mode GROUNDRL_L2_PREFETCH=$plan timeout 80 "$b/groundrl" bench rollout \
    --model "$work/model" --dtype bf16 --device cuda --prompts "$prompts" --n 8 --bandwidth-gbs 4800 "$@"
}
for entry in ${ENTRIES:-0:0,0,0,0 0:1,1,0,0 1:1,1,0,0 2:1,1,0,0 3:1,1,0,0 2:1,1,0.375,0.375 3:1,1,0.375,0.375 3:1,1,0.25,0.5 0:0,0,0,0}; do
  run "$entry" 8 --repeats 5 2> "$work/raw/log" | sed "s/^{/{\"plan\":\"$entry\",/" >> "$work/raw/bench.jsonl"
done
n=0
for entry in ${PROFILES:-0:1,1,0,0 2:1,1,0.375,0.375}; do
  n=$((n + 1))
  run "$entry" 8 --repeats 1 --profile "$work/profile-$n" > /dev/null 2>&1
  { echo "profile $n: $entry"; python3 scripts/bench/kernel_table.py "$work/profile-$n/generate.json" --top 24 --per 127; } \
    > "$out/kernels-8x8-$n.txt" 2>&1
done
python3 - "$work/raw/bench.jsonl" <<'PY' > "$out/table.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"{r['plan']:>20} {r['prompts']:>3} x {r['n']}: {r['generated_tokens_per_s']:8.0f} tokens/s, "
          f"step {r['decode_step_ms']:.3f} ms, {r['roofline_fraction']:.1%} of the roofline, "
          f"prefill {r['prefill_seconds']:.3f} s")
PY
cat "$out/table.txt"
grep -E "test result|FAILED|panicked" "$out/gpu-tests.txt"
for f in "$out"/kernels-8x8-*.txt; do head -22 "$f" | cut -c1-150; done
