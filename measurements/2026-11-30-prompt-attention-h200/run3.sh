#!/usr/bin/env bash
# Every test of the tensor and training crates built for CUDA with the early-launch build
# (.device/tests.tar.xz, scripts/gpu/build.sh's test binaries of it), then `bench rollout` 8 x 8
# four more times each, alternating, for the builds without (.device/bins-74fd688.tar.xz) and with
# (.device/bins.tar.xz) the early launch, then the GRPO step of configs/3b-1gpu.toml (steps 2-10,
# scripts/gpu/train-runs.sh) for de8fc19's build (.device/bins-de8fc19.tar.xz), 74fd688's and this
# one, alternating, two runs each. $OUT gets tensor-tests.txt, train-tests.txt, rollout.txt,
# table.txt and raw.tgz.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
source scripts/gpu/train-runs.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-prompt-attention-step
rm -rf "$work"
mkdir -p "$out" "$work/tests" "$work/new" "$work/before" "$work/de8fc19"
tar xJf .device/tests.tar.xz -C "$work/tests" || exit 1
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
tar xJf .device/bins-74fd688.tar.xz -C "$work/before" || exit 1
tar xJf .device/bins-de8fc19.tar.xz -C "$work/de8fc19" || exit 1
(cd crates/groundrl-tensor && timeout 200 "$work/tests/groundrl-tensor-tests" --test-threads 4) > "$out/tensor-tests.txt" 2>&1
echo "rc=$?" >> "$out/tensor-tests.txt"
(cd crates/groundrl-train && timeout 300 "$work/tests/groundrl-train-tests" --test-threads 8) > "$out/train-tests.txt" 2>&1
echo "rc=$?" >> "$out/train-tests.txt"
grep -hE "^test result|^rc=|FAILED|panicked" "$out/tensor-tests.txt" "$out/train-tests.txt" | head -20
rollout_ab "$out/rollout.txt" "$work/rollout-model" "$work/before/groundrl" "$work/new/groundrl" 4
train_runs_setup "$work/new/groundrl" "$work" || exit 1
for i in 1 2; do
  for build in de8fc19 before new; do train_run "$build$i" "$work/$build/groundrl"; done
done
cat "$work/raw/exits.txt" > "$out/table.txt"
python3 scripts/bench/step_table.py "$work/raw" de8fc191 before1 new1 de8fc192 before2 new2 >> "$out/table.txt"
cat "$out/table.txt"
tar czf "$out/raw.tgz" -C "$work" raw
