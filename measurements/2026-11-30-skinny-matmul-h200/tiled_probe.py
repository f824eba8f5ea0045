"""What holds tiled.cu's matmul at 64 rows: each variant as it is, with the weights in 2 KB copies
(probe 4), without tensor-core work (probe 1, 5), without copies (probe 2: the multiplications
alone, on whatever the shared memory holds); CUDA graphs of 40 launches cycling eight weight copies.

    python3 tiled_probe.py LIBTILED.so
"""

import sys

import torch

sys.argv = sys.argv[:2]
import tiled_bench as tb  # noqa: E402  (runs tiled_bench's table first)

SHAPES = [("gate|up", 22016, 2048, [(0, 1), (3, 1), (5, 1), (6, 1)]),
          ("down_proj", 2048, 11008, [(3, 8), (1, 8), (5, 8), (6, 4), (6, 8)]),
          ("q|k|v", 2560, 2048, [(0, 8), (3, 8), (5, 8), (6, 4)])]
PROBES = [(0, "as is"), (4, "2 KB copies"), (1, "no mma"), (5, "2 KB, no mma"), (2, "no copies")]
print()
print(f"{'product':10} {'kernel':14} {'splits':>6} " + " ".join(f"{p[1]:>12}" for p in PROBES))
for name, n, k, tries in SHAPES:
    x = torch.randn(64, k, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(64, n, device="cuda", dtype=torch.bfloat16)
    for variant, splits in tries:
        bn = tb.lib.tiled_band_rows(variant)
        wts = [tb.tiled(torch.randn(n, k, device="cuda", dtype=torch.bfloat16), bn)
               for _ in range(tb.COPIES)]
        row = [tb.timed(lambda i: tb.ours(variant, splits, x, wts[i], n, y, None, False, probe))
               for probe, _ in PROBES]
        print(f"{name:10} {tb.NAMES[variant]:14} {splits:6} " + " ".join(f"{t:12.2f}" for t in row))
        del wts
        torch.cuda.empty_cache()
