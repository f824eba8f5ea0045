#!/usr/bin/env bash
# Why the cluster kernel of run2 was slow: how many clusters of a kernel shaped like it (160 threads,
# 177, 146, 113, 81 or 64 KiB of shared memory) the GPU keeps active at once (probe.cu, built with
# nvcc 13.0 for sm_90a: .device/probe/probe), and `bench attention` at 64 rows, 8 samples a prompt
# (1,262 shared columns, 1,326 keys) with "deep" (the prompt kernel and the per-row kernel) and
# "clusters" (4, 6 and 8 splits through the cluster kernel), each call's kernels' device times from
# the profiler. $OUT gets probe.txt and attention.txt.
set -uo pipefail
source scripts/gpu/env.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-probe
rm -rf "$work"
mkdir -p "$out"
for build in deep:bins-deep2 clusters:bins-clusters; do
  mkdir -p "$work/${build%%:*}"
  tar xJf ".device/${build#*:}.tar.xz" -C "$work/${build%%:*}" || exit 1
done
.device/probe/probe > "$out/probe.txt" 2>&1
cat "$out/probe.txt"
for build in deep clusters; do
  echo "== $build" >> "$out/attention.txt"
  timeout 120 "$work/$build/groundrl" bench attention --samples 8 --splits 0,2,4,6,8 --iters 100 \
    --profile "$work/profile-$build" >> "$out/attention.txt" 2>&1
  for s in 0 2 4 6 8; do
    echo "-- $build, splits $s (device times, per call)" >> "$out/attention.txt"
    python3 scripts/bench/kernel_table.py "$work/profile-$build/kernel-$s.json" --top 4 --per 101 >> "$out/attention.txt" 2>&1
  done
done
cat "$out/attention.txt"
