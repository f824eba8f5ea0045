#!/usr/bin/env bash
# The commit's build (.device/tests.tar.xz and .device/bins.tar.xz: scripts/gpu/build.sh's binaries):
# every test of the tensor and training crates built for CUDA; the new test against a mutant build
# of the tensor tests whose per-row attention kernel does not wait for the prompt kernel
# (.device/mutant-own.tar.xz: decode_attention.cu's `wait_prerequisites()` removed), which it must
# fail; then the GRPO step of configs/3b-1gpu.toml (steps 2-10, scripts/gpu/train-runs.sh) for
# the build before (.device/bins-5204505.tar.xz, see run1.sh) and this one, alternating, one run
# each. $OUT gets tensor-tests.txt, train-tests.txt, mutant.txt, table.txt and raw.tgz.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/train-runs.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-dependent-launch-step
rm -rf "$work"
mkdir -p "$out" "$work/tests" "$work/new" "$work/before" "$work/mutant"
tar xJf .device/tests.tar.xz -C "$work/tests" || exit 1
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
tar xJf .device/bins-5204505.tar.xz -C "$work/before" || exit 1
tar xJf .device/mutant-own.tar.xz -C "$work/mutant" || exit 1
(cd crates/groundrl-tensor && timeout 200 "$work/tests/groundrl-tensor-tests" --test-threads 4) > "$out/tensor-tests.txt" 2>&1
echo "rc=$?" >> "$out/tensor-tests.txt"
(cd crates/groundrl-train && timeout 300 "$work/tests/groundrl-train-tests" --test-threads 8) > "$out/train-tests.txt" 2>&1
echo "rc=$?" >> "$out/train-tests.txt"
(cd crates/groundrl-tensor && timeout 100 "$work/mutant/groundrl-tensor-tests" kernels_started_early) > "$out/mutant.txt" 2>&1
echo "rc=$?" >> "$out/mutant.txt"
grep -hE "^test result|^rc=|FAILED|panicked" "$out/tensor-tests.txt" "$out/train-tests.txt" "$out/mutant.txt" | head -20
train_runs_setup "$work/new/groundrl" "$work" || exit 1
for build in before new; do train_run "${build}1" "$work/$build/groundrl"; done
cat "$work/raw/exits.txt" > "$out/table.txt"
python3 scripts/bench/step_table.py "$work/raw" before1 new1 >> "$out/table.txt"
cat "$out/table.txt"
tar czf "$out/raw.tgz" -C "$work" raw
