#!/usr/bin/env bash
# The commit's build (.device/tests.tar.xz and .device/bins.tar.xz: scripts/gpu/build.sh's binaries):
# every test of the tensor and training crates built for CUDA; then the GRPO step of
# configs/3b-1gpu.toml (steps 2-10, scripts/gpu/train-runs.sh) for 40c0a61's build
# (.device/bins-pdl.tar.xz) and this one, alternating, one run each. $OUT gets tensor-tests.txt,
# train-tests.txt, table.txt and raw.tgz.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/train-runs.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-sampler-step-train
rm -rf "$work"
mkdir -p "$out" "$work/tests" "$work/new" "$work/before"
tar xJf .device/tests.tar.xz -C "$work/tests" || exit 1
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
tar xJf .device/bins-pdl.tar.xz -C "$work/before" || exit 1
(cd crates/groundrl-tensor && timeout 200 "$work/tests/groundrl-tensor-tests" --test-threads 4) > "$out/tensor-tests.txt" 2>&1
echo "rc=$?" >> "$out/tensor-tests.txt"
(cd crates/groundrl-train && timeout 200 "$work/tests/groundrl-train-tests" --test-threads 8) > "$out/train-tests.txt" 2>&1
echo "rc=$?" >> "$out/train-tests.txt"
grep -hE "^test result|^rc=|FAILED|panicked" "$out/tensor-tests.txt" "$out/train-tests.txt" | head -20
train_runs_setup "$work/new/groundrl" "$work" || exit 1
for build in before new; do train_run "${build}1" "$work/$build/groundrl"; done
cat "$work/raw/exits.txt" > "$out/table.txt"
python3 scripts/bench/step_table.py "$work/raw" before1 new1 >> "$out/table.txt"
cat "$out/table.txt"
tar czf "$out/raw.tgz" -C "$work" raw
