#!/usr/bin/env bash
# The decoding step's products as the engine calls them against k-slices' f32 partial products, at 64
# rows (all four products) and 256 rows (the first 12 lines: q|k|v and o_proj), with torch alone (no
# groundrl binary). $OUT gets split64.txt and split256.txt.
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
python3 measurements/2026-12-01-split-products-h200/split_products.py 64 2>&1 | tee "$out/split64.txt"
python3 measurements/2026-12-01-split-products-h200/split_products.py 256 2>&1 | head -12 | tee "$out/split256.txt"
