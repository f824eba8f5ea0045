#!/usr/bin/env bash
# skinny.cu's matmul (built into .device/libskinny.so by the nvcc line in its header) against
# torch's cuBLAS calls for the 3B decoder's products at 64 rows, in one process. $OUT gets table.txt.
set -uo pipefail
source scripts/gpu/env.sh
out=${OUT:-/tmp/out}
mkdir -p "$out"
python3 measurements/2026-11-30-skinny-matmul-h200/skinny_bench.py .device/libskinny.so > "$out/table.txt" 2>&1
cat "$out/table.txt"
