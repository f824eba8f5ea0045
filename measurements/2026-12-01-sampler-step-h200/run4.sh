#!/usr/bin/env bash
# The training crate's tests built for CUDA at the commit adding this script
# (.device/train-tests-fixed: its lib test binary). $OUT gets train-tests-fixed.txt.
set -uo pipefail
source scripts/gpu/env.sh
out=${OUT:-/tmp/out}
mkdir -p "$out"
(cd crates/groundrl-train && timeout 200 "$PWD/../../.device/train-tests-fixed" --test-threads 8) > "$out/train-tests-fixed.txt" 2>&1
echo "rc=$?" >> "$out/train-tests-fixed.txt"
grep -hE "^test result|^rc=|FAILED|panicked" "$out/train-tests-fixed.txt"
