#!/usr/bin/env bash
# The gate|up kernel's copies alone from the row-major and from a tiled layout, and the kernel itself
# (tile_layouts.cu, built into .device/tile-layouts by the nvcc line in its header). $OUT gets table.txt.
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,memory.total,clocks.max.memory --format=csv,noheader
  .device/tile-layouts
} > "$out/table.txt" 2>&1
cat "$out/table.txt"
