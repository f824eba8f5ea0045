#!/usr/bin/env bash
# "base" (2aa6768's build, .device/bins-final.tar.xz) beside "ahead" (the sampler loading a row's
# step record at its start; bins-ahead, tests-ahead). The sampler alone as the step launches it
# (bench.py, .device/sabench/lib{old,new}.so of build-libs.sh); the tensor and training crates' CUDA
# tests of ahead; `bench rollout` 8 x 8 of the 3B shape, one untimed run, then four rounds of the two
# in turn. $OUT gets sampler.txt, tests.tgz and rollout.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-ahead
rm -rf "$work"
mkdir -p "$out"
python3 .device/sabench/bench.py .device/sabench/libold.so .device/sabench/libnew.so 2>&1 | tee "$out/sampler.txt"
unpack_builds "$work" base:bins-final ahead:bins-ahead || exit 1
mkdir -p "$work/tests-out/ahead"
cuda_tests "$work/tests-out/ahead" "$work" tests-ahead
tar czf "$out/tests.tgz" -C "$work" tests-out
grep -q "^rc=0" "$work/tests-out/ahead/tensor-tests.txt" || exit 1  # no timing of a build whose tests fail
base="$work/base/groundrl" ahead="$work/ahead/groundrl"
"$base" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model-3b" > /dev/null || exit 1
timeout 90 "$base" bench rollout --model "$work/model-3b" --dtype bf16 --device cuda --prompts 8 --n 8 > /dev/null 2>&1
rollout_rounds "$out/rollout.txt" "$work/model-3b" 4 "" "$base" "$ahead"
