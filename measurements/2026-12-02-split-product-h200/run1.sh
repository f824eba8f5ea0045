#!/usr/bin/env bash
# The decoding step's output projections through the Hopper split product
# (crates/groundrl-tensor/csrc/split_product.cu), its first version ("new": 07ee36d with
# six-stages.patch, 6 stages, the first 6 stages' weights copied before the wait;
# .device/bins.tar.xz, .device/tests.tar.xz: scripts/gpu/build.sh's binaries) against 3a380d9's
# (.device/bins-base.tar.xz), in one call: the tensor and training crates' CUDA tests; `bench rollout` 8 x 8 of the 3B shape,
# three rounds alternating; one profiled generation of each with the period of a layer and of a step,
# and both builds' kernel tables. $OUT gets tensor-tests.txt, train-tests.txt, rollout-3b.txt,
# periods.txt, kernels-before.txt and kernels-new.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-split-product
rm -rf "$work"
mkdir -p "$out" "$work/new" "$work/before" "$work/tests"
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
tar xJf .device/bins-base.tar.xz -C "$work/before" || exit 1
tar xJf .device/tests.tar.xz -C "$work/tests" || exit 1
(cd crates/groundrl-tensor && timeout 200 "$work/tests/groundrl-tensor-tests" --test-threads 4) > "$out/tensor-tests.txt" 2>&1
echo "rc=$?" >> "$out/tensor-tests.txt"
(cd crates/groundrl-train && timeout 200 "$work/tests/groundrl-train-tests" --test-threads 8) > "$out/train-tests.txt" 2>&1
echo "rc=$?" >> "$out/train-tests.txt"
grep -hE "^test result|^rc=|FAILED|panicked" "$out/tensor-tests.txt" "$out/train-tests.txt" | head -10
grep -hE "largest error|values over|differ" "$out/tensor-tests.txt" | head -20
rollout_ab "$out/rollout-3b.txt" "$work/model-3b" "$work/before/groundrl" "$work/new/groundrl" 3
rollout_profile "$out/periods.txt" "$work/model-3b" "$work/before/groundrl" "$work/new/groundrl"
cat "$out/periods.txt"
for build in before new; do
  python3 scripts/bench/kernel_table.py "$work/profile-$build/generate.json" --top 30 --per 127 \
    --subtract "$work/profile-$build/prefill.json" > "$out/kernels-$build.txt" 2>&1
  head -16 "$out/kernels-$build.txt" | cut -c1-120
done
