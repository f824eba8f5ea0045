#!/usr/bin/env bash
# The gate|up weights read with no arithmetic in several orders (read_patterns.cu, built into
# .device/read-patterns by the nvcc line in its header), and torch's 64-row product with the same
# weights (cuBLAS) in the same call, eight copies cycled in both. $OUT gets table.txt.
set -uo pipefail
source scripts/gpu/env.sh
out=${OUT:-/tmp/out}
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,memory.total,clocks.max.memory --format=csv,noheader
  .device/read-patterns
  python3 - <<'PY'
import torch
copies = [torch.randn(22016, 2048, device="cuda", dtype=torch.bfloat16) for _ in range(8)]
for rows in (64, 256):
    x = torch.randn(rows, 2048, device="cuda", dtype=torch.bfloat16)
    for i in range(8):
        x @ copies[i].t()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = 40
    start.record()
    for i in range(reps):
        x @ copies[i % 8].t()
    stop.record()
    torch.cuda.synchronize()
    us = start.elapsed_time(stop) * 1000 / reps
    print(f"torch {torch.__version__} x ({rows}, 2048) @ W^T (cuBLAS): {us:.1f} us, {22016 * 4096 / us / 1e6:.2f} TB/s of weights")
PY
} > "$out/table.txt" 2>&1
cat "$out/table.txt"
