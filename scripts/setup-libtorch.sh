#!/usr/bin/env bash
# Fetches libtorch 2.11.0 (the version tch 0.24.0 is locked to) from PyPI alone and unpacks it into the
# project's git-ignored cache. Idempotent: a second run only prints the environment.
#
# Why PyPI: no other download site is reachable from our machines. The torch wheel carries the same
# libtorch shared libraries and headers as the standalone archive. Its libtorch_cpu.so still wants
# libcudart.so.13 and libcupti.so.13 at load time, even on a CPU-only machine, so those two NVIDIA
# wheels are fetched too; nothing else from CUDA is needed for a CPU build.
#
# Usage: scripts/setup-libtorch.sh            # install if missing, then print `export ...` lines
#        eval "$(scripts/setup-libtorch.sh)"  # and apply them to this shell
set -euo pipefail

TORCH_VERSION=2.11.0
CUDART_VERSION=13.0.96
CUPTI_VERSION=13.0.85

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${GROUNDRL_CACHE:-$root/.cache}
libtorch=$cache/libtorch-$TORCH_VERSION
cudalib=$cache/cuda-runtime-$CUDART_VERSION
stamp=$libtorch/.groundrl-complete

download() { # $1 = requirement, $2 = target folder
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$2" "$1" \
    --python-version 3.11 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_25_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 >&2
}

if [ ! -f "$stamp" ]; then
  echo "setup-libtorch: fetching torch==$TORCH_VERSION and its two CUDA run-time wheels from PyPI" >&2
  work=$(mktemp -d "$cache.tmp.XXXXXX" 2>/dev/null || { mkdir -p "$cache"; mktemp -d "$cache/tmp.XXXXXX"; })
  trap 'rm -rf "$work"' EXIT
  download "torch==$TORCH_VERSION" "$work/whl"
  download "nvidia-cuda-runtime==$CUDART_VERSION" "$work/whl"
  download "nvidia-cuda-cupti==$CUPTI_VERSION" "$work/whl"
  mkdir -p "$work/unz"
  for whl in "$work"/whl/*.whl; do
    python3 -m zipfile -e "$whl" "$work/unz" >&2
  done
  rm -rf "$libtorch" "$cudalib"
  mkdir -p "$libtorch" "$cudalib"
  mv "$work/unz/torch/lib" "$work/unz/torch/include" "$libtorch/"
  [ -d "$work/unz/torch/share" ] && mv "$work/unz/torch/share" "$libtorch/"
  echo "$TORCH_VERSION" > "$libtorch/build-version"
  mv "$work"/unz/nvidia/cu13/lib/* "$cudalib/"
  rm -rf "$work"
  trap - EXIT
  touch "$stamp"
  echo "setup-libtorch: done ($libtorch)" >&2
fi

echo "export LIBTORCH='$libtorch'"
echo "export GROUNDRL_CUDA_RUNTIME='$cudalib'"
echo "export LD_LIBRARY_PATH='$libtorch/lib:$cudalib'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
