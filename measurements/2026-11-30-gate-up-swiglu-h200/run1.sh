#!/usr/bin/env bash
# crates/groundrl-tensor/csrc/gate_up_swiglu.cu built alone into .device/libgateup.so:
#   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xcompiler -fPIC -shared \
#     crates/groundrl-tensor/csrc/gate_up_swiglu.cu -o .device/libgateup.so
# (the toolkit of scripts/gpu/cuda-toolkit.sh), against torch's cuBLAS product in one process.
# $OUT gets table.txt.
set -uo pipefail
source scripts/gpu/env.sh
out=${OUT:-/tmp/out}
mkdir -p "$out"
python3 measurements/2026-11-30-gate-up-swiglu-h200/gate_up_bench.py .device/libgateup.so > "$out/table.txt" 2>&1
cat "$out/table.txt"
