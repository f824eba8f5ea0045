#!/usr/bin/env bash
# Fetches the parts of the CUDA 13.0 toolkit that GPU builds (`cuda` feature) need, from PyPI's NVIDIA
# wheels, into the project's git-ignored cache:
# - the runtime and crt headers that libtorch's ATen/cuda headers include, for the C++ shims
#   (crates/groundrl-tensor/csrc/*.cpp);
# - nvcc with its front end (cicc, libdevice) and the CCCL headers, for the CUDA kernels
#   (crates/groundrl-tensor/csrc/kernels.cu);
# - the cuBLAS, cuSPARSE and cuSOLVER headers that ATen/cuda/CUDAContext.h includes, for the NCCL shim
#   (crates/groundrl-dist/csrc/nccl.cpp includes c10d's ProcessGroupNCCL.hpp, which includes it), at
#   the versions that torch 2.11.0's requirement `cuda-toolkit[...]==13.0.2` pins. They have their own
#   folder and stamp, so that a cache made before they were added gains them alone.
# Nothing is linked from these wheels (the CUDA runtime comes from scripts/setup-libtorch.sh's folder
# here and from torch's own on the GPU machine). Idempotent; prints the export lines.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${GROUNDRL_CACHE:-$root/.cache}
toolkit=$cache/cuda-toolkit-13.0
stamp=$toolkit/.groundrl-complete

if [ ! -f "$stamp" ]; then
  echo "cuda-toolkit: fetching nvcc, nvvm, cccl, runtime and crt headers from PyPI" >&2
  mkdir -p "$cache"
  work=$(mktemp -d "$cache/tmp.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  for req in nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88 nvidia-cuda-nvcc==13.0.88 \
    nvidia-nvvm==13.0.88 nvidia-cuda-cccl==13.0.85; do
    python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$work/whl" "$req" \
      --python-version 3.11 --implementation cp \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 >&2
  done
  for whl in "$work"/whl/*.whl; do
    python3 -m zipfile -e "$whl" "$work/unz" >&2
  done
  chmod +x "$work"/unz/nvidia/cu13/bin/* "$work"/unz/nvidia/cu13/nvvm/bin/*
  rm -rf "$toolkit"
  mv "$work/unz/nvidia/cu13" "$toolkit"
  touch "$stamp"
fi

math=$cache/cuda-math-headers-13.0
if [ ! -f "$math/.groundrl-complete" ]; then
  echo "cuda-toolkit: fetching the cuBLAS, cuSPARSE and cuSOLVER headers from PyPI" >&2
  mkdir -p "$cache"
  mwork=$(mktemp -d "$cache/tmp.XXXXXX")
  trap 'rm -rf "${work:-}" "$mwork"' EXIT
  for req in nvidia-cublas==13.1.0.3 nvidia-cusparse==12.6.3.3 nvidia-cusolver==12.0.4.66; do
    python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$mwork/whl" "$req" \
      --python-version 3.11 --implementation cp --platform manylinux_2_27_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 >&2
  done
  # The headers only: the libraries are hundreds of megabytes and nothing links them.
  for whl in "$mwork"/whl/*.whl; do
    python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist() if "/include/" in n])' "$whl" "$mwork/unz"
  done
  rm -rf "$math"
  mv "$mwork/unz/nvidia/cu13" "$math"
  touch "$math/.groundrl-complete"
fi

echo "export GROUNDRL_CUDA_INCLUDE='$toolkit/include'"
echo "export GROUNDRL_CUDA_MATH_INCLUDE='$math/include'"
echo "export NVCC='$toolkit/bin/nvcc'"
