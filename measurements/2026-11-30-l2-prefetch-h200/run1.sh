#!/usr/bin/env bash
# The decoding step's weights fetched into L2 ahead of their matmuls, fractions of q|k|v, o, gate|up
# and down from GROUNDRL_L2_PREFETCH (the build of this run only): `bench rollout` at 8 x 8 (medians
# of 5) for each plan, 32 x 8 for two, and the kernel table of one profiled 8 x 8 generation per plan
# named in PROFILE. The binaries of scripts/gpu/build.sh packed in .device/bins.tar.xz. $OUT gets
# table.txt, gpu-tests.txt and kernels-*.txt.
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
bench() {  # PLAN PROMPTS
  GROUNDRL_L2_PREFETCH=$1 timeout 80 "$b/groundrl" bench rollout --model "$work/model" --dtype bf16 \
    --device cuda --prompts "$2" --n 8 --bandwidth-gbs 4800 --repeats 5 2> "$work/raw/log-$1-$2" \
    | sed "s/^{/{\"plan\":\"$1\",/" >> "$work/raw/bench.jsonl"
}
for plan in ${PLANS:-0,0,0,0 1,1,0,0 1,1,0.25,0.25 1,1,0.375,0.375 1,1,0.5,0.5 1,1,0.25,0.5 0,1,0.375,0.375 0,0,0,0}; do
  bench "$plan" 8
done
for plan in ${PLANS32:-0,0,0,0 1,1,0.375,0.375}; do bench "$plan" 32; done
for plan in ${PROFILE:-1,1,0.375,0.375}; do
  GROUNDRL_L2_PREFETCH=$plan timeout 80 "$b/groundrl" bench rollout --model "$work/model" --dtype bf16 \
    --device cuda --prompts 8 --n 8 --repeats 1 --profile "$work/profile-$plan" > /dev/null 2>&1
  python3 scripts/bench/kernel_table.py "$work/profile-$plan/generate.json" --top 24 --per 127 \
    > "$out/kernels-8x8-$plan.txt" 2>&1
done
python3 - "$work/raw/bench.jsonl" <<'PY' > "$out/table.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"{r['plan']:>18} {r['prompts']:>3} x {r['n']}: {r['generated_tokens_per_s']:8.0f} tokens/s, "
          f"step {r['decode_step_ms']:.3f} ms, {r['roofline_fraction']:.1%} of the roofline, "
          f"prefill {r['prefill_seconds']:.3f} s")
PY
cat "$out/table.txt"
grep -E "test result|FAILED|panicked" "$out/gpu-tests.txt"
