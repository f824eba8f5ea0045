#!/usr/bin/env bash
# Builds the sampling kernels bench.py times into .device/sabench/lib*.so (run from the repository
# root, with the toolkit of scripts/gpu/cuda-toolkit.sh), for sm_90 as the product builds
# sampling.cu: old: 4c217f6's csrc/sampling.cu; new: the working tree's.
set -euo pipefail
here=measurements/2026-12-03-sampler-ahead-h200
work=.device/sabench
eval "$(scripts/gpu/cuda-toolkit.sh)"
toolkit=$(cd "$(dirname "$NVCC")/.." && pwd)
mkdir -p "$work"
cp "$here/bench.py" "$work/"
git show 4c217f6:crates/groundrl-tensor/csrc/sampling.cu > "$work/old.cu"
cp crates/groundrl-tensor/csrc/sampling.cu "$work/new.cu"
for variant in old new; do
  "$NVCC" -std=c++17 -O3 -shared -Xcompiler -fPIC -L"$toolkit/lib" -gencode=arch=compute_90,code=sm_90 \
    "$work/$variant.cu" -o "$work/lib$variant.so"
done
