#!/usr/bin/env bash
# Two variants of the 64-column split product beside run1.sh's "new" build (.device/bins.tar.xz)
# and 3a380d9's ("before", .device/bins-base.tar.xz): "late" copies no weights before waiting for
# the kernel ahead (07ee36d with `late.patch`, .device/bins-late.tar.xz), "deep" has 12 stages in
# flight instead of 6 (192 KiB of shared memory, too much to share an SM with the gate|up kernel's
# blocks; 07ee36d with `deep.patch`, .device/bins-deep.tar.xz). `bench rollout` 8 x 8 of the 3B shape, three
# rounds in turn; one profiled generation of each with the period of a layer and of a step and each
# layer's kernels (layer_timeline.py). $OUT gets rollout-variants.txt, periods-variants.txt and
# timeline-variants.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-split-variants
here=measurements/2026-12-02-split-product-h200
rm -rf "$work"
mkdir -p "$out"
for build in new:bins before:bins-base late:bins-late deep:bins-deep; do
  mkdir -p "$work/${build%%:*}"
  tar xJf ".device/${build#*:}.tar.xz" -C "$work/${build%%:*}" || exit 1
done
builds=("$work/before/groundrl" "$work/new/groundrl" "$work/late/groundrl" "$work/deep/groundrl")
rollout_rounds "$out/rollout-variants.txt" "$work/model-3b" 3 "" "${builds[@]}"
rollout_profile "$out/periods-variants.txt" "$work/model-3b" "${builds[@]}"
cat "$out/periods-variants.txt"
for build in before new late deep; do
  echo "== $build" >> "$out/timeline-variants.txt"
  python3 "$here/layer_timeline.py" "$work/profile-$build/generate.json" >> "$out/timeline-variants.txt"
done
cat "$out/timeline-variants.txt"
