#!/usr/bin/env bash
# Benchmark of `groundrl eval coco` against pycocotools 2.0.11 on a synthetic COCO-sized set:
# 5,000 images, 80 categories, 100 detections per image (500,000 detections), 1-10 ground-truth
# boxes per image. Prints a table with both times and the ratio.
#
# What each time includes:
#   pycocotools evaluate()+accumulate()+summarize(), timed in Python; JSON loading excluded.
#   groundrl "evaluate": the library's evaluate() (validation, grouping, matching, accumulation,
#     summary), from `--timing` on stderr; JSON loading excluded. This is the like-for-like number.
#   groundrl "whole command": wall time of `groundrl eval coco --json`, process start and JSON
#     loading included.
#
# The binary: $GROUNDRL_BIN if set, else target/release/groundrl (built with `cargo build --release`).
# Env: COCO_BENCH_DIR keeps the generated files (default: a temporary directory), GROUNDRL_CACHE.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
if [ -z "${GROUNDRL_BIN:-}" ]; then
  cargo build -q --release -p groundrl
  GROUNDRL_BIN=target/release/groundrl
fi
py=$(scripts/python-env.sh)
exec "$py" scripts/bench/coco_bench.py --bin "$GROUNDRL_BIN" ${COCO_BENCH_DIR:+--dir "$COCO_BENCH_DIR"}
