#!/usr/bin/env bash
# "base" (2aa6768's build, .device/bins-final.tar.xz) beside "head" (e9a22d2: the output head through
# csrc/head_product.cu; bins-head) and "inputs" (f71585e: head, and the step's inputs in one kernel;
# bins-inputs, tests-inputs). The head's product alone against cuBLAS's (bench.py with
# .device/hbench/libhead.so of build-lib.sh); the tensor and training crates' CUDA tests of inputs;
# one profiled generation of each (`bench rollout` 8 x 8 of the 3B shape) with the period of a layer
# and of a step and the step's kernels outside the layers; `bench rollout` 8 x 8, one untimed run,
# then three rounds of the three in turn. $OUT gets kernel.txt, tests.tgz, periods.txt,
# outside-*.txt and rollout.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-head
rm -rf "$work"
mkdir -p "$out"
python3 .device/hbench/bench.py .device/hbench/libhead.so 2>&1 | tee "$out/kernel.txt"
unpack_builds "$work" base:bins-final head:bins-head inputs:bins-inputs || exit 1
mkdir -p "$work/tests-out/inputs"
cuda_tests "$work/tests-out/inputs" "$work" tests-inputs
tar czf "$out/tests.tgz" -C "$work" tests-out
grep -q "^rc=0" "$work/tests-out/inputs/tensor-tests.txt" || exit 1  # no timing of a build whose tests fail
names=(base head inputs)
builds=()
for name in "${names[@]}"; do builds+=("$work/$name/groundrl"); done
"${builds[0]}" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model-3b" > /dev/null || exit 1
rollout_profile "$out/periods.txt" "$work/model-3b" "${builds[@]}"
cat "$out/periods.txt"
for name in "${names[@]}"; do
  python3 measurements/2026-12-03-attention-ready-h200/step_outside.py "$work/profile-$name/generate.json" \
    > "$out/outside-$name.txt" 2>&1
  cat "$out/outside-$name.txt"
done
timeout 90 "${builds[0]}" bench rollout --model "$work/model-3b" --dtype bf16 --device cuda --prompts 8 --n 8 > /dev/null 2>&1
rollout_rounds "$out/rollout.txt" "$work/model-3b" 3 "" "${builds[@]}"
