#!/usr/bin/env bash
# The decoding step's own kernels launched early (programmatic dependent launch) against the build
# before, in one call: the fused kernels' and the rollout engine's CUDA tests of the new build,
# `bench rollout` at 8 x 8 (medians of 5) alternating the two builds twice, 32 x 8 once each, the new
# build's graph replay against its eager launches (--compare-eager), and the kernel table of one
# profiled 8 x 8 generation with each build. Binaries of scripts/gpu/build.sh: the build before in
# .device/bins-before.tar.xz, the new one in .device/bins.tar.xz. $OUT gets table.txt, tests.txt
# and kernels-*.txt.
set -uo pipefail
source scripts/gpu/env.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-early-launch
rm -rf "$work"
mkdir -p "$out" "$work/before" "$work/after" "$work/raw"
tar xJf .device/bins-before.tar.xz -C "$work/before" || exit 1
tar xJf .device/bins.tar.xz -C "$work/after" || exit 1
{ timeout 120 "$work/after/groundrl-tensor-tests" fused:: --test-threads=1
  timeout 200 "$work/after/groundrl-tensor-tests" rollout:: --test-threads=1; } > "$out/tests.txt" 2>&1
"$work/after/groundrl" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model" > /dev/null || exit 1
bench() {  # BUILD PROMPTS [flags]
  local build=$1 prompts=$2
  shift 2
  timeout 90 "$work/$build/groundrl" bench rollout --model "$work/model" --dtype bf16 --device cuda \
    --prompts "$prompts" --n 8 --bandwidth-gbs 4800 "$@" 2>> "$work/raw/log" \
    | sed "s/^{/{\"build\":\"$build\",/" >> "$work/raw/bench.jsonl"
}
for build in before after before after; do bench $build 8 --repeats 5; done
for build in before after; do bench $build 32 --repeats 5; done
bench after 8 --repeats 3 --compare-eager
for build in before after; do
  timeout 90 "$work/$build/groundrl" bench rollout --model "$work/model" --dtype bf16 --device cuda \
    --prompts 8 --n 8 --repeats 1 --profile "$work/profile-$build" > /dev/null 2>&1
  python3 scripts/bench/kernel_table.py "$work/profile-$build/generate.json" --top 24 --per 127 \
    > "$out/kernels-8x8-$build.txt" 2>&1
done
python3 - "$work/raw/bench.jsonl" <<'PY' > "$out/table.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    graph = "graph" if r.get("cuda_graph") else "eager"
    same = r.get("same_tokens_as_graph")
    extra = "" if same is None else f", same tokens as the graph: {same}, largest log-prob difference {r['max_logprob_diff_vs_graph']}"
    print(f"{r['build']:>6} {r['prompts']:>3} x {r['n']} ({graph}): {r['generated_tokens_per_s']:8.0f} tokens/s, "
          f"step {r['decode_step_ms']:.3f} ms, {r['roofline_fraction']:.1%} of the roofline, "
          f"prefill {r['prefill_seconds']:.3f} s{extra}")
PY
cp "$work/raw/bench.jsonl" "$out/bench.jsonl"
cat "$out/table.txt"
grep -E "test result|FAILED|panicked" "$out/tests.txt"
for f in "$out"/kernels-8x8-*.txt; do echo "== $f"; head -22 "$f" | cut -c1-140; done
