#!/usr/bin/env bash
# Two tile widths of the split product side by side: run1.sh's "new" build with 64 output columns a
# block, 4 slices of k and 6 stages (.device/bins.tar.xz), the same with 128 columns, 8 slices and 4
# stages (07ee36d with `tile128.patch`, .device/bins-t128.tar.xz, "t128", its tensor tests
# .device/tests-t128.tar.xz)
# and 3a380d9's build ("before"), in one call: t128's tests of the kernels it changes; `bench rollout`
# 8 x 8 of the 3B shape, three rounds in turn; one profiled generation of each with the period of a
# layer and of a step, and each layer's kernels with their medians of start, end and duration
# (layer_timeline.py). $OUT gets t128-tests.txt, rollout-tiles.txt, periods-tiles.txt and
# timeline-tiles.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-split-tiles
here=measurements/2026-12-02-split-product-h200
rm -rf "$work"
mkdir -p "$out" "$work/new" "$work/before" "$work/t128" "$work/tests"
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
tar xJf .device/bins-base.tar.xz -C "$work/before" || exit 1
tar xJf .device/bins-t128.tar.xz -C "$work/t128" || exit 1
tar xJf .device/tests-t128.tar.xz -C "$work/tests" || exit 1
(cd crates/groundrl-tensor && timeout 200 "$work/tests/groundrl-tensor-tests" --test-threads 4 \
  split_product add_product kernels_started gate_up) > "$out/t128-tests.txt" 2>&1
echo "rc=$?" >> "$out/t128-tests.txt"
grep -hE "^test result|^rc=|FAILED|panicked|largest error" "$out/t128-tests.txt" | head -12
rollout_rounds "$out/rollout-tiles.txt" "$work/model-3b" 3 "" "$work/before/groundrl" "$work/new/groundrl" "$work/t128/groundrl"
rollout_profile "$out/periods-tiles.txt" "$work/model-3b" "$work/before/groundrl" "$work/new/groundrl" "$work/t128/groundrl"
cat "$out/periods-tiles.txt"
for build in before new t128; do
  echo "== $build" >> "$out/timeline-tiles.txt"
  python3 "$here/layer_timeline.py" "$work/profile-$build/generate.json" >> "$out/timeline-tiles.txt"
done
cat "$out/timeline-tiles.txt"
