#!/usr/bin/env bash
# Fetches the parts of the CUDA 13.0 toolkit that GPU builds (`cuda` feature) need, from PyPI's NVIDIA
# wheels, into the project's git-ignored cache:
# - the runtime and crt headers that libtorch's ATen/cuda headers include, for the C++ shims
#   (crates/groundrl-tensor/csrc/*.cpp);
# - nvcc with its front end (cicc, libdevice) and the CCCL headers, for the CUDA kernels
#   (crates/groundrl-tensor/csrc/kernels.cu).
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

echo "export GROUNDRL_CUDA_INCLUDE='$toolkit/include'"
echo "export NVCC='$toolkit/bin/nvcc'"
