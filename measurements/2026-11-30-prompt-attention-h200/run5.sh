#!/usr/bin/env bash
# The tensor crate's `fused::` tests built for CUDA (.device/tensor-tests.tar.xz, scripts/gpu/build.sh's
# test binary) after the shared-prompt test gained a second step column (the first step's, right
# after the prompt) and NaN in every row's columns past the step's. $OUT gets tests.txt.
set -uo pipefail
source scripts/gpu/env.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-prompt-attention-test
rm -rf "$work"
mkdir -p "$out" "$work"
tar xJf .device/tensor-tests.tar.xz -C "$work" || exit 1
(cd crates/groundrl-tensor && timeout 200 "$work/groundrl-tensor-tests" fused:: --test-threads 1 --nocapture) > "$out/tests.txt" 2>&1
echo "rc=$?" >> "$out/tests.txt"
grep -E "^test |test result|^rc=|panicked" "$out/tests.txt"
