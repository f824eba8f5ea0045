#!/usr/bin/env bash
# The fourth call (the build whose batches leave out the pixels of images whose features are
# given): `configs/3b-1gpu.toml` from a folder, from the preset, with the tower trained and with
# checkpointing, then `bench rollout` at 8 x 8 and 32 x 8 on the same folder. Run from the
# repository root; raw output under $OUT.
set -uo pipefail
source scripts/gpu/env.sh
out=${OUT:-/tmp/out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpu.txt"
LIMIT_S=100 OUT=$out bash scripts/gpu/start-and-batches.sh start > "$out/start-and-batches.log" 2>&1
for p in 8 32; do
  timeout 80 .device/groundrl bench rollout --model /tmp/groundrl-start-and-batches/model --dtype bf16 \
    --device cuda --prompts $p --n 8 --bandwidth-gbs 4800 >> "$out/bench_rollout.jsonl" 2> "$out/bench-$p.log"
done
cat "$out/start-and-batches.txt"
python3 - "$out/bench_rollout.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"{r['prompts']} x {r['n']}: {r['generated_tokens_per_s']:.0f} tokens/s, decode step {r['decode_step_ms']:.2f} ms, "
          f"{r['roofline_fraction']:.1%} of the roofline, prefill {r['prefill_seconds']:.3f} s")
PY
