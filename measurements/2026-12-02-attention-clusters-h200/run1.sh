#!/usr/bin/env bash
# e693da9's build ("final": down_proj's split product copies its weights only after waiting for the
# gate|up kernel; .device/bins-final.tar.xz) beside "deep" (the same tree with down_proj's first
# twelve stages' weights copied before that wait; .device/bins-deep2.tar.xz, its tests
# .device/tests-deep2.tar.xz), in one call: deep's tensor and training crates' CUDA tests; `bench
# rollout` 8 x 8 of the 3B shape, three rounds in turn; one profiled generation of each with the
# period of a layer and of a step and each layer's kernels (layer_timeline.py of
# 2026-12-02-split-product-h200). $OUT gets tensor-tests.txt, train-tests.txt, rollout.txt,
# periods.txt and timeline.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-deep
rm -rf "$work"
mkdir -p "$out" "$work/tests"
for build in final:bins-final deep:bins-deep2; do
  mkdir -p "$work/${build%%:*}"
  tar xJf ".device/${build#*:}.tar.xz" -C "$work/${build%%:*}" || exit 1
done
tar xJf .device/tests-deep2.tar.xz -C "$work/tests" || exit 1
(cd crates/groundrl-tensor && timeout 200 "$work/tests/groundrl-tensor-tests" --test-threads 4) > "$out/tensor-tests.txt" 2>&1
echo "rc=$?" >> "$out/tensor-tests.txt"
(cd crates/groundrl-train && timeout 200 "$work/tests/groundrl-train-tests" --test-threads 8) > "$out/train-tests.txt" 2>&1
echo "rc=$?" >> "$out/train-tests.txt"
grep -hE "^test result|^rc=|FAILED|panicked|largest error" "$out/tensor-tests.txt" "$out/train-tests.txt" | head -12
builds=("$work/final/groundrl" "$work/deep/groundrl")
rollout_rounds "$out/rollout.txt" "$work/model-3b" 3 "" "${builds[@]}"
rollout_profile "$out/periods.txt" "$work/model-3b" "${builds[@]}"
cat "$out/periods.txt"
for build in final deep; do
  echo "== $build" >> "$out/timeline.txt"
  python3 measurements/2026-12-02-split-product-h200/layer_timeline.py "$work/profile-$build/generate.json" >> "$out/timeline.txt"
done
cat "$out/timeline.txt"
