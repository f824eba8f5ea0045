#!/usr/bin/env bash
# Fetches the CUDA 13.0 headers that libtorch's ATen/cuda headers include (cuda_runtime_api.h and its
# crt/ folder) from PyPI's NVIDIA wheels into the project's git-ignored cache, for compiling the CUDA
# graph shim (crates/groundrl-tensor/csrc/cuda_graph.cpp) in GPU builds. Headers only: nothing is
# linked from these wheels. Idempotent; prints the `export GROUNDRL_CUDA_INCLUDE=...` line.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${GROUNDRL_CACHE:-$root/.cache}
include=$cache/cuda-include-13.0
stamp=$include/.groundrl-complete

if [ ! -f "$stamp" ]; then
  echo "cuda-headers: fetching nvidia-cuda-runtime and nvidia-cuda-crt headers from PyPI" >&2
  mkdir -p "$cache"
  work=$(mktemp -d "$cache/tmp.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  for req in nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88; do
    python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$work/whl" "$req" \
      --python-version 3.11 --implementation cp \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 >&2
  done
  for whl in "$work"/whl/*.whl; do
    python3 -m zipfile -e "$whl" "$work/unz" >&2
  done
  rm -rf "$include"
  mv "$work/unz/nvidia/cu13/include" "$include"
  touch "$stamp"
fi

echo "export GROUNDRL_CUDA_INCLUDE='$include'"
