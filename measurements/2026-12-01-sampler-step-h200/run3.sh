#!/usr/bin/env bash
# The tensor crate's tests built for CUDA after the rotary frequencies moved into the kept decoding
# state (.device/tensor-tests-fixed: the lib test binary of the commit adding this script), and the
# new test `a_replayed_step_reads_only_what_outlives_the_call` in a build of the same test against
# 7e4aeeb's decoding steps, whose frequencies lived with one call (.device/tensor-tests-mutant), which
# must fail. $OUT gets tests-fixed.txt and tests-mutant.txt.
set -uo pipefail
source scripts/gpu/env.sh
out=${OUT:-/tmp/out}
mkdir -p "$out"
(cd crates/groundrl-tensor && timeout 200 "$PWD/../../.device/tensor-tests-fixed" --test-threads 4) > "$out/tests-fixed.txt" 2>&1
echo "rc=$?" >> "$out/tests-fixed.txt"
(cd crates/groundrl-tensor && timeout 100 "$PWD/../../.device/tensor-tests-mutant" a_replayed_step) > "$out/tests-mutant.txt" 2>&1
echo "rc=$?" >> "$out/tests-mutant.txt"
grep -hE "^test result|^rc=|FAILED|panicked|a_replayed_step" "$out/tests-fixed.txt" "$out/tests-mutant.txt"
