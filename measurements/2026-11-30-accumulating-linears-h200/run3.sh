#!/usr/bin/env bash
# The shipped step profiled with the build before (0c7d773) and with the accumulating linear
# projections, one after the other: `scripts/gpu/step-profile.sh` with RUNS=frozen STEPS=4
# PROMPTS=8 each (step 3 profiled). Binaries packed in .device/bins.tar.xz as for run2.sh. $OUT gets
# before/ and after/ with each run's kernel tables and summary; logs and records in raw.tgz.
set -uo pipefail
out=${OUT:-/tmp/out}
bins=/tmp/groundrl-profile-bins
rm -rf "$bins" && mkdir -p "$bins"
tar xJf .device/bins.tar.xz -C "$bins" || exit 1
for build in before after; do
  binary=$bins/groundrl
  [ $build = before ] && binary=$bins/groundrl-before
  BIN=$binary RUNS=frozen STEPS=4 PROMPTS=8 LIMIT_S=120 BENCH_LIMIT_S=60 WORK=/tmp/groundrl-profile-$build \
    OUT=/tmp/groundrl-profile-out/$build bash scripts/gpu/step-profile.sh > /tmp/groundrl-profile-$build.txt 2>&1
  mkdir -p "$out/$build"
  cp /tmp/groundrl-profile-out/$build/kernels-frozen-update.txt /tmp/groundrl-profile-out/$build/step-profile.txt "$out/$build/"
done
tail -n 12 "$out"/*/step-profile.txt
head -n 12 "$out"/*/kernels-frozen-update.txt
tar czf "$out/raw.tgz" -C /tmp groundrl-profile-before.txt groundrl-profile-after.txt \
  groundrl-profile-out/before/step-profile.tgz groundrl-profile-out/after/step-profile.tgz \
  groundrl-profile-out/before/kernels-frozen-rollout.txt groundrl-profile-out/after/kernels-frozen-rollout.txt
