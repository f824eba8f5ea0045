#!/usr/bin/env bash
# Times COCO bbox evaluation on a synthetic COCO-sized set (5,000 images, 80 categories, 100 detections
# per image: 500,000 detections; 1-10 ground-truth boxes per image) in one run, and prints the tables of
# coco_bench.py: the whole user sequence (COCO(gt) + loadRes + COCOeval + evaluate + accumulate +
# summarize, with the results as a path, a list of dicts, an Nx7 array, and on 2,500 of the images) and
# the evaluation alone, for pycocotools 2.0.11, faster-coco-eval, hotcoco, ultrafast-pycocotools
# (versions pinned in coco-env.sh), the groundrl wheel built from this tree, groundrl-score's library
# call, and the `groundrl eval coco` command when a binary is given. Every run's 12 stats and eval
# arrays are checked against pycocotools'. pycocotools takes minutes a variant:
# COCO_BENCH_REFERENCE=path,subset runs it on those only (the others are checked against its path run).
#
# Env: GROUNDRL_BIN (the groundrl binary; without it the command row is left out), GROUNDRL_WHEEL (a
# wheel to time instead of building one), COCO_BENCH_ROUNDS (default 5), COCO_BENCH_DIR (keeps the
# generated files), GROUNDRL_CACHE (where the environments live), CARGO_TARGET_DIR.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
py=$(scripts/bench/coco-env.sh)
wheel=${GROUNDRL_WHEEL:-}
wheels=""
if [ -z "$wheel" ]; then
  wheels=$(mktemp -d)
  ref=$(scripts/python-env.sh)
  "$(dirname "$ref")/maturin" build --release --quiet --out "$wheels" >&2
  wheel=$(ls "$wheels"/groundrl-*.whl)
fi
"$py" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel" >&2
[ -z "$wheels" ] || rm -rf "$wheels"
lib_bin=$(cargo bench -q -p groundrl-score --bench coco --no-run --message-format=json |
  "$py" -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "coco" and m.get("executable"):
        print(m["executable"])')
commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates/groundrl-score crates/groundrl-py || echo "+dirty")
exec "$py" scripts/bench/coco_bench.py --lib-bin "$lib_bin" ${GROUNDRL_BIN:+--cli-bin "$GROUNDRL_BIN"} \
  --commit "$commit" --rounds "${COCO_BENCH_ROUNDS:-5}" ${COCO_BENCH_DIR:+--dir "$COCO_BENCH_DIR"} \
  ${COCO_BENCH_REFERENCE:+--reference-variants "$COCO_BENCH_REFERENCE"}
