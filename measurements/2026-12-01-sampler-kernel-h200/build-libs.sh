#!/usr/bin/env bash
# Builds the sampling kernels this folder times into .device/sbench/lib*.so (run from the repository
# root, with the toolkit of scripts/gpu/cuda-toolkit.sh), each with cc.cu (the compute-capability
# query the product takes from its Hopper library), for sm_90 as the product builds sampling.cu:
# old: 40c0a61's csrc/sampling.cu; new: the commit's; prev, pass1, cluster: new with this folder's
# patches (prev.patch: without the unit-temperature shortcut; pass1.patch: the first pass alone;
# cluster.patch: prev's kernel as two blocks a row in clusters of two on sm_90 GPUs).
set -euo pipefail
here=measurements/2026-12-01-sampler-kernel-h200
work=.device/sbench
eval "$(scripts/gpu/cuda-toolkit.sh)"
toolkit=$(cd "$(dirname "$NVCC")/.." && pwd)
mkdir -p "$work"
cp "$here/bench.py" "$here/cc.cu" "$work/"
git show 40c0a61:crates/groundrl-tensor/csrc/sampling.cu > "$work/old.cu"
cp crates/groundrl-tensor/csrc/sampling.cu "$work/new.cu"
for variant in prev pass1 cluster; do
  patch -s -o "$work/$variant.cu" "$work/new.cu" "$here/$variant.patch"
done
for variant in old new prev pass1 cluster; do
  "$NVCC" -std=c++17 -O3 -shared -Xcompiler -fPIC -L"$toolkit/lib" -gencode=arch=compute_90,code=sm_90 \
    "$work/$variant.cu" "$work/cc.cu" -o "$work/lib$variant.so"
done
