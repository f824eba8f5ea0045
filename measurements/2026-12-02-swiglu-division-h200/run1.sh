#!/usr/bin/env bash
# The gate|up kernel's SwiGLU dividing without a branch: the commit's build (.device/bins.tar.xz,
# .device/tests.tar.xz: scripts/gpu/build.sh's binaries) against 408cf13's (.device/bins-base.tar.xz),
# in one call: the tensor and training crates' CUDA tests; the kernel alone beside the old division
# (../2026-12-02-gate-up-layout-h200/tile_layouts.cu built against this commit's kernel, as
# .device/tile-layouts); `bench rollout` 8 x 8 of the 3B shape, three rounds alternating; one profiled
# generation of each with the period of a layer and of a step
# (../2026-12-01-dependent-launch-h200/layer_period.py) and the new build's kernel table; `bench
# rollout` 32 x 8, two rounds alternating; the GRPO step of configs/3b-1gpu.toml (steps 2-10,
# scripts/gpu/train-runs.sh), one run each alternating; then `bench rollout` of the new build on the
# first 8 prompts of the same data as the trainer samples them (temperature 1, the config's
# max_pixels), two runs, beside the trainer's generation time. $OUT gets tensor-tests.txt,
# train-tests.txt, kernel-alone.txt, rollout-3b.txt, periods.txt, kernels-decode-8x8.txt,
# rollout-32x8.txt, table.txt, bench-data.txt and raw.tgz.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
source scripts/gpu/train-runs.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-swiglu-division
rm -rf "$work"
mkdir -p "$out" "$work/new" "$work/before" "$work/tests"
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
tar xJf .device/bins-base.tar.xz -C "$work/before" || exit 1
tar xJf .device/tests.tar.xz -C "$work/tests" || exit 1
(cd crates/groundrl-tensor && timeout 200 "$work/tests/groundrl-tensor-tests" --test-threads 4) > "$out/tensor-tests.txt" 2>&1
echo "rc=$?" >> "$out/tensor-tests.txt"
(cd crates/groundrl-train && timeout 200 "$work/tests/groundrl-train-tests" --test-threads 8) > "$out/train-tests.txt" 2>&1
echo "rc=$?" >> "$out/train-tests.txt"
grep -hE "^test result|^rc=|FAILED|panicked" "$out/tensor-tests.txt" "$out/train-tests.txt" | head -10
.device/tile-layouts > "$out/kernel-alone.txt" 2>&1
grep -E "kernel|plain launch" "$out/kernel-alone.txt"
rollout_ab "$out/rollout-3b.txt" "$work/model-3b" "$work/before/groundrl" "$work/new/groundrl" 3
for build in before new; do
  timeout 90 "$work/$build/groundrl" bench rollout --model "$work/model-3b" --dtype bf16 --device cuda \
    --prompts 8 --n 8 --repeats 1 --profile "$work/profile-$build" > /dev/null 2> "$work/profile.log"
  echo "== $build" >> "$out/periods.txt"
  python3 measurements/2026-12-01-dependent-launch-h200/layer_period.py "$work/profile-$build/generate.json" >> "$out/periods.txt"
done
cat "$out/periods.txt"
python3 scripts/bench/kernel_table.py "$work/profile-new/generate.json" --top 30 --per 127 \
  --subtract "$work/profile-new/prefill.json" > "$out/kernels-decode-8x8.txt" 2>&1
head -12 "$out/kernels-decode-8x8.txt" | cut -c1-110
rollout_ab "$out/rollout-32x8.txt" "$work/model-3b" "$work/before/groundrl" "$work/new/groundrl" 2 --prompts 32 --n 8
train_runs_setup "$work/new/groundrl" "$work" || exit 1
for build in before new; do train_run "${build}1" "$work/$build/groundrl"; done
cat "$work/raw/exits.txt" > "$out/table.txt"
python3 scripts/bench/step_table.py "$work/raw" before1 new1 >> "$out/table.txt"
cat "$out/table.txt"
for i in 1 2; do
  timeout 90 "$work/new/groundrl" bench rollout --model "$work/model" --data "$work/data/samples.jsonl" \
    --max-pixels 1003520 --prompts 8 --n 8 --new-tokens 128 --dtype bf16 --device cuda \
    --bandwidth-gbs 4800 >> "$out/bench-data.txt" 2> /dev/null
done
python3 - "$out/bench-data.txt" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        print(f"bench --data: {r['seconds']:.3f} s for {r['batch']} x {r['new_tokens']} tokens, "
              f"{r['prompt_tokens']}-token prompts, prefill {r['prefill_seconds']:.3f} s")
PY
tar czf "$out/raw.tgz" -C "$work" raw
