#!/usr/bin/env bash
# Randomized parity of `groundrl eval coco --json` against live pycocotools 2.0.11: 60 generated cases
# (fixed seed) covering crowd boxes, tied scores, empty images, categories without ground truth or
# without detections, tiny to huge boxes across the area ranges, an `area` field that differs from w*h,
# annotation id 0, and more than 100 detections per image. All 12 stats must agree to 1e-12.
# Prints one line per failing stat, then `coco parity: N passed, M failed`; exits 1 on any failure.
#
# The binary: $GROUNDRL_BIN if set; else target/release/groundrl if it exists; else target/debug/groundrl
# (built with `cargo build -p groundrl` if missing). Env: COCO_PARITY_CASES (default 60),
# COCO_PARITY_SEED (default 20251121), GROUNDRL_CACHE (where scripts/python-env.sh keeps the venv).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
if [ -z "${GROUNDRL_BIN:-}" ]; then
  if [ -x target/release/groundrl ]; then
    GROUNDRL_BIN=target/release/groundrl
  else
    [ -x target/debug/groundrl ] || cargo build -q -p groundrl
    GROUNDRL_BIN=target/debug/groundrl
  fi
fi
py=$(scripts/python-env.sh)
exec "$py" scripts/parity/coco_parity.py --bin "$GROUNDRL_BIN" \
  --cases "${COCO_PARITY_CASES:-60}" --seed "${COCO_PARITY_SEED:-20251121}"
