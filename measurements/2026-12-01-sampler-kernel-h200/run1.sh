#!/usr/bin/env bash
# Times the sampling kernels that build-libs.sh made (.device/sbench) in one process on the GPU
# machine. $OUT gets bench.txt.
set -uo pipefail
source scripts/gpu/env.sh
out=${OUT:-/tmp/out}
mkdir -p "$out"
work=$PWD/.device/sbench
python3 "$work/bench.py" "$work/libold.so" "$work/libprev.so" "$work/libnew.so" "$work/libpass1.so" \
  "$work/libcluster.so" | tee "$out/bench.txt"
