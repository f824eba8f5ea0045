#!/usr/bin/env bash
# The commit's own build (74fd688's product code, without the early launch): every test of the tensor
# and training crates built for CUDA (.device/tests.tar.xz), then `bench rollout` at 32 x 8 (batch
# 256) twice each, alternating, for de8fc19's build (.device/bins-de8fc19.tar.xz) and this one
# (.device/bins.tar.xz). $OUT gets tensor-tests.txt, train-tests.txt and rollout-32x8.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-prompt-attention-final
rm -rf "$work"
mkdir -p "$out" "$work/tests" "$work/new" "$work/de8fc19"
tar xJf .device/tests.tar.xz -C "$work/tests" || exit 1
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
tar xJf .device/bins-de8fc19.tar.xz -C "$work/de8fc19" || exit 1
(cd crates/groundrl-tensor && timeout 200 "$work/tests/groundrl-tensor-tests" --test-threads 4) > "$out/tensor-tests.txt" 2>&1
echo "rc=$?" >> "$out/tensor-tests.txt"
(cd crates/groundrl-train && timeout 300 "$work/tests/groundrl-train-tests" --test-threads 8) > "$out/train-tests.txt" 2>&1
echo "rc=$?" >> "$out/train-tests.txt"
grep -hE "^test result|^rc=|FAILED|panicked" "$out/tensor-tests.txt" "$out/train-tests.txt" | head -20
rollout_ab "$out/rollout-32x8.txt" "$work/model" "$work/de8fc19/groundrl" "$work/new/groundrl" 2 --prompts 32 --n 8
