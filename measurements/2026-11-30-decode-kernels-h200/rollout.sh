#!/usr/bin/env bash
# The shorter run: the fused kernels' CUDA tests, `bench rollout` at 8 x 8 with the matmul kernel and
# with cuBLAS's (medians of 5), and the kernel table of one profiled 8 x 8 generation (per decoding
# step). Run from the repository root with the `cuda` build in .device/; $OUT gets table.txt,
# gpu-tests.txt and kernels-rollout-8x8.txt.
set -uo pipefail
source scripts/gpu/env.sh
bin=$PWD/.device/groundrl
out=${OUT:-/tmp/out}
work=/tmp/groundrl-decode-kernels
mkdir -p "$out" "$work/raw"
raw=$work/raw
timeout 150 .device/groundrl-tensor-tests fused:: --test-threads=1 > "$out/gpu-tests.txt" 2>&1
"$bin" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model" > /dev/null || exit 1
for mode in kernel cublas; do
  flag=()
  [ $mode = cublas ] && flag=(--no-skinny-gemm)
  timeout 80 "$bin" bench rollout --model "$work/model" --dtype bf16 --device cuda --prompts 8 --n 8 \
    --bandwidth-gbs 4800 --repeats 5 "${flag[@]}" 2> "$raw/bench-rollout-8-$mode.log" \
    | sed "s/^{/{\"mode\":\"$mode\",/" >> "$raw/bench_rollout.jsonl"
done
timeout 80 "$bin" bench rollout --model "$work/model" --dtype bf16 --device cuda --prompts 8 --n 8 \
  --repeats 1 --profile "$work/profile" > /dev/null 2> "$raw/bench-rollout-profile.log"
python3 scripts/bench/kernel_table.py "$work/profile/generate.json" --top 30 --per 127 \
  > "$out/kernels-rollout-8x8.txt" 2>&1
python3 - "$raw" <<'PY' > "$out/table.txt"
import json, sys
for line in open(f"{sys.argv[1]}/bench_rollout.jsonl"):
    r = json.loads(line)
    print(f"bench rollout {r['prompts']} x {r['n']} ({r['mode']}): {r['generated_tokens_per_s']:.0f} tokens/s, "
          f"decode step {r['decode_step_ms']:.3f} ms, {r['roofline_fraction']:.1%} of the roofline "
          f"({r['roofline_step_ms']:.3f} ms), {r['roofline_prompts_once_fraction']:.1%} with prompts read once, "
          f"prefill {r['prefill_seconds']:.3f} s (medians of {r['repeats']})")
PY
cat "$out/table.txt"
grep -E "^test |test result" "$out/gpu-tests.txt"
