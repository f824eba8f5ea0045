#!/usr/bin/env bash
# The tensor and training crates' tests built for CUDA (scripts/gpu/build.sh's groundrl-tensor-tests
# and groundrl-train-tests, packed in .device/tests.tar.xz) on the GPU machine: every test of both,
# the rollouts of the training tests through the engine's decoding step among them. $OUT gets
# tensor-tests.txt and train-tests.txt.
set -uo pipefail
source scripts/gpu/env.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-cuda-tests
rm -rf "$work"
mkdir -p "$out" "$work"
tar xJf .device/tests.tar.xz -C "$work" || exit 1
(cd crates/groundrl-tensor && timeout 200 "$work/groundrl-tensor-tests" --test-threads 4) > "$out/tensor-tests.txt" 2>&1
echo "rc=$?" >> "$out/tensor-tests.txt"
(cd crates/groundrl-train && timeout 300 "$work/groundrl-train-tests" --test-threads 8) > "$out/train-tests.txt" 2>&1
echo "rc=$?" >> "$out/train-tests.txt"
grep -hE "^test result|^rc=|FAILED|panicked" "$out/tensor-tests.txt" "$out/train-tests.txt" | head -20
