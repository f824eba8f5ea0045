#!/usr/bin/env bash
# The third run (the build with `--keep-tower-blocks`): `groundrl bench train` (8 rows x 1,390
# tokens, the whole 3B model trained) recomputing every block, and the tower's alone with its first
# 0, 8, 12, 16 and 20 blocks keeping their activations. Run from the repository root with the
# `cuda` build at .device/groundrl; $OUT gets table.txt and bench_train.jsonl.
set -uo pipefail
source scripts/gpu/env.sh
out=${OUT:-/tmp/out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$out/table.txt"
bench() {
  timeout 100 .device/groundrl bench train --preset 3b --dtype bf16 --device cuda --rows 8 "$@" \
    >> "$out/bench_train.jsonl" 2> /tmp/bench-train.log || echo "$*: $(tail -1 /tmp/bench-train.log)" >> "$out/table.txt"
}
bench --checkpoint all
for kept in 0 8 12 16 20; do bench --checkpoint tower --keep-tower-blocks $kept; done
python3 - "$out/bench_train.jsonl" <<'PY' >> "$out/table.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"bench train --checkpoint {r['checkpoint']} --keep-tower-blocks {r['keep_tower_blocks']}: {r['ms']:.1f} ms, "
          f"{r['mfu_model_flops']:.1%} MFU by model FLOPs, {r['device_memory_gib']:.1f} GiB")
PY
cat "$out/table.txt"
