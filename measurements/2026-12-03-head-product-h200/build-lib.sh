#!/usr/bin/env bash
# Builds csrc/head_product.cu alone into .device/hbench/libhead.so for bench.py (run from the
# repository root, with the toolkit of scripts/gpu/cuda-toolkit.sh), for sm_90a as the product builds it.
set -euo pipefail
here=measurements/2026-12-03-head-product-h200
work=.device/hbench
eval "$(scripts/gpu/cuda-toolkit.sh)"
toolkit=$(cd "$(dirname "$NVCC")/.." && pwd)
mkdir -p "$work"
cp "$here/bench.py" "$work/"
"$NVCC" -std=c++17 -O3 -shared -Xcompiler -fPIC -L"$toolkit/lib" -gencode=arch=compute_90a,code=sm_90a \
  crates/groundrl-tensor/csrc/head_product.cu -o "$work/libhead.so"
