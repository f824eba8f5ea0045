#!/usr/bin/env bash
# The sampler's ranges over four blocks a row (a first kernel) and the draw one warp a row (a second)
# against the build before, in one call: the tensor crate's tests built for CUDA (the sampler's among
# them), then `bench rollout` 8 x 8 (medians of 5) three times each, alternating, on one random-weight
# 3B folder, and one profiled generation of the new build per decoding step
# (scripts/bench/kernel_table.py --subtract). .device/bins.tar.xz: scripts/gpu/build.sh's binaries
# of 518c088 with two-kernels.patch (this folder); .device/bins-before.tar.xz: those of 518c088. $OUT gets tests.txt, rollouts-compare.txt,
# rollout.txt and kernels-decode-8x8.txt.
set -uo pipefail
source scripts/gpu/env.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-sampler-blocks
rm -rf "$work"
mkdir -p "$out" "$work/new" "$work/before"
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
tar xJf .device/bins-before.tar.xz -C "$work/before" || exit 1
timeout 240 "$work/new/groundrl-tensor-tests" --test-threads 1 > "$out/tests.txt" 2>&1
echo "tests rc=$?" >> "$out/tests.txt"
grep -E "values differ|test result|FAILED|panicked" "$out/tests.txt"
"$work/new/groundrl" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model" > /dev/null || exit 1
# The same rollouts (8 synthetic screenshots x 8 samples, temperature 1, seed 0, log-probs) from both
# builds: the sampler's sums run in the same order, so the files should be equal byte for byte.
"$work/new/groundrl" synth --out "$work/synth" --n 8 --seed 0 --difficulty easy --prompt instruct > /dev/null || exit 1
for build in before new; do
  timeout 120 "$work/$build/groundrl" rollout --model "$work/model" --data "$work/synth/samples.jsonl" --n 8 \
    --max-new-tokens 64 --logprobs --dtype bf16 --device cuda --out "$work/rollouts-$build.jsonl" \
    > /dev/null 2>> "$work/rollout.log" || tail -5 "$work/rollout.log"
done
if cmp -s "$work/rollouts-before.jsonl" "$work/rollouts-new.jsonl"; then
  echo "rollouts of both builds equal byte for byte: $(wc -l < "$work/rollouts-new.jsonl") lines, $(wc -c < "$work/rollouts-new.jsonl") bytes"
else
  echo "rollouts differ: $(wc -l < "$work/rollouts-before.jsonl") and $(wc -l < "$work/rollouts-new.jsonl") lines"
  cmp "$work/rollouts-before.jsonl" "$work/rollouts-new.jsonl" | head -3
fi > "$out/rollouts-compare.txt"
cat "$out/rollouts-compare.txt"
for i in 1 2 3; do
  for build in before new; do
    echo "== $build, run $i" >> "$out/rollout.txt"
    timeout 90 "$work/$build/groundrl" bench rollout --model "$work/model" --dtype bf16 --device cuda \
      --prompts 8 --n 8 --bandwidth-gbs 4800 --repeats 5 >> "$out/rollout.txt" 2> "$work/bench.log"
  done
done
python3 - "$out/rollout.txt" <<'PY'
import json, sys
label = ""
for line in open(sys.argv[1]):
    if line.startswith("=="):
        label = line.strip("= \n")
    elif line.startswith("{"):
        r = json.loads(line)
        print(f"{label:12} step {r['decode_step_ms']:.3f} ms  {100 * r['roofline_fraction']:.1f}% of the roofline"
              f"  {r['generated_tokens_per_s']:.0f} tokens/s  prefill {r['prefill_seconds']:.3f} s")
PY
timeout 90 "$work/new/groundrl" bench rollout --model "$work/model" --dtype bf16 --device cuda --prompts 8 --n 8 \
  --repeats 1 --profile "$work/profile" > /dev/null 2> "$work/profile.log"
python3 scripts/bench/kernel_table.py "$work/profile/generate.json" --top 30 --per 127 \
  --subtract "$work/profile/prefill.json" > "$out/kernels-decode-8x8.txt" 2>&1
head -30 "$out/kernels-decode-8x8.txt" | cut -c1-150
