#!/usr/bin/env bash
# Three builds in one call: "deep" (run2's), "ahead" (deep, each attention stage's mask read during
# the stage before it, and the per-row kernel's fold reading four prompt parts at a time; the
# cluster kernel's launcher declining every call; .device/bins-ahead.tar.xz) and "clusters2" (ahead
# with the cluster kernel, its blocks' states read at once in the merge, at most as many blocks a
# cluster as the GPU keeps active in one wave; .device/bins-clusters2.tar.xz, its tests
# .device/tests-clusters2.tar.xz): clusters2's tensor and training crates' CUDA tests (its prompt
# and per-row kernels are ahead's, run by the tests with 1 and 3 splits); `bench attention` at 64
# rows, 8 samples a prompt, with each call's kernels' device times; `bench rollout` 8 x 8 of the 3B
# shape, three rounds in turn; one profiled generation of each with the period of a layer and of a
# step and each layer's kernels. $OUT gets tensor-tests.txt, train-tests.txt, attention.txt,
# rollout.txt, periods.txt and timeline.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-clusters2
rm -rf "$work"
mkdir -p "$out" "$work/tests"
names=(deep ahead clusters2)
for build in deep:bins-deep2 ahead:bins-ahead clusters2:bins-clusters2; do
  mkdir -p "$work/${build%%:*}"
  tar xJf ".device/${build#*:}.tar.xz" -C "$work/${build%%:*}" || exit 1
done
tar xJf .device/tests-clusters2.tar.xz -C "$work/tests" || exit 1
(cd crates/groundrl-tensor && timeout 150 "$work/tests/groundrl-tensor-tests" --test-threads 4) > "$out/tensor-tests.txt" 2>&1
echo "rc=$?" >> "$out/tensor-tests.txt"
(cd crates/groundrl-train && timeout 200 "$work/tests/groundrl-train-tests" --test-threads 8) > "$out/train-tests.txt" 2>&1
echo "rc=$?" >> "$out/train-tests.txt"
grep -hE "^test result|^rc=|FAILED|panicked|largest error" "$out/tensor-tests.txt" "$out/train-tests.txt" | head -12
grep -q "^rc=0" "$out/tensor-tests.txt" || exit 1  # no timing of a build whose tests fail
for build in "${names[@]}"; do
  echo "== $build" >> "$out/attention.txt"
  timeout 120 "$work/$build/groundrl" bench attention --samples 8 --splits 0,4,6,8 --iters 100 \
    --profile "$work/attention-$build" >> "$out/attention.txt" 2>&1
  for s in 0 4 6 8; do
    echo "-- $build, splits $s (device times, per call)" >> "$out/attention.txt"
    python3 scripts/bench/kernel_table.py "$work/attention-$build/kernel-$s.json" --top 3 --per 101 \
      | grep -E "us/call|attention" >> "$out/attention.txt" 2>&1
  done
done
cat "$out/attention.txt"
builds=()
for build in "${names[@]}"; do builds+=("$work/$build/groundrl"); done
rollout_rounds "$out/rollout.txt" "$work/model-3b" 3 "" "${builds[@]}"
rollout_profile "$out/periods.txt" "$work/model-3b" "${builds[@]}"
cat "$out/periods.txt"
for build in "${names[@]}"; do
  echo "== $build" >> "$out/timeline.txt"
  python3 measurements/2026-12-02-split-product-h200/layer_timeline.py "$work/profile-$build/generate.json" >> "$out/timeline.txt"
done
cat "$out/timeline.txt"
