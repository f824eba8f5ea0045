#!/usr/bin/env bash
# Times COCO bbox evaluation on a synthetic COCO-sized set (5,000 images, 80 categories, 100 detections
# per image: 500,000 detections; 1-10 ground-truth boxes per image) in one run, and prints one table:
# pycocotools 2.0.11, faster-coco-eval, hotcoco, ultrafast-pycocotools (versions pinned in coco-env.sh),
# groundrl's library call, the groundrl wheel when `groundrl.coco` imports, and the whole
# `groundrl eval coco` command when a binary is given. Each tool's 12 stats (and precision/recall arrays
# where exposed) are checked against pycocotools; see coco_bench.py for what each time includes.
#
# groundrl's library is timed through groundrl-score's coco bench binary (no libtorch needed).
# Env: GROUNDRL_BIN (the groundrl binary; without it the whole-command row is left out), GROUNDRL_WHEEL
# (a wheel file to install into the bench environment first), COCO_BENCH_ROUNDS (default 5),
# COCO_BENCH_DIR (keeps the generated files), GROUNDRL_CACHE (where the environment lives).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
py=$(scripts/bench/coco-env.sh)
if [ -n "${GROUNDRL_WHEEL:-}" ]; then
  "$py" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$GROUNDRL_WHEEL" >&2
fi
lib_bin=$(cargo bench -q -p groundrl-score --bench coco --no-run --message-format=json |
  "$py" -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "coco" and m.get("executable"):
        print(m["executable"])')
commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates/groundrl-score || echo "+dirty")
exec "$py" scripts/bench/coco_bench.py --lib-bin "$lib_bin" ${GROUNDRL_BIN:+--cli-bin "$GROUNDRL_BIN"} \
  --commit "$commit" --rounds "${COCO_BENCH_ROUNDS:-5}" ${COCO_BENCH_DIR:+--dir "$COCO_BENCH_DIR"}
