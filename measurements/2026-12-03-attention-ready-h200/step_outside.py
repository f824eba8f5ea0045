#!/usr/bin/env python3
"""The kernels of a decoding step outside its layers, from a profiled `bench rollout` trace
(generate.json): per replayed step (from one sampler kernel's start to the next), every kernel that is
not one of a layer's (gate|up, split products, norms after a product, rotation, the attention's two),
in order, with the medians of its start and end relative to the sampler's start, and the medians of
where the first layer starts and the last one ends. Standard library only.

Usage: step_outside.py generate.json
"""
import json
import statistics
import sys

LAYER = ("gate_up_swiglu", "split_product", "add_rms_norm", "decode_rotary", "prompt_attention",
         "decode_attention")


def short(name):
    for key in ("sample", "rms_norm", "rotary_tables", "Memcpy", "Memset", "gather", "nvjet",
                "index_fill", "FillFunctor", "add", "masked_fill", "logical", "arange", "copy"):
        if key in name:
            return key if key != "nvjet" else "head (cuBLAS)"
    return name[:40]


events = json.load(open(sys.argv[1]))["traceEvents"]
kernels = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e),
                 key=lambda e: e["ts"])
starts = [i for i, e in enumerate(kernels) if "sample" in e["name"]]
rows, first, last, period = [], [], [], []
for a, b in zip(starts, starts[1:]):
    t0 = kernels[a]["ts"]
    step = kernels[a:b]
    period.append(kernels[b]["ts"] - t0)
    layer = [e for e in step if any(k in e["name"] for k in LAYER)]
    if not layer:
        continue
    first.append(layer[0]["ts"] - t0)
    last.append(max(e["ts"] + e["dur"] for e in layer) - t0)
    rows.append([(short(e["name"]), e["ts"] - t0, e["ts"] + e["dur"] - t0) for e in step
                 if not any(k in e["name"] for k in LAYER)])
common = max(set(len(r) for r in rows), key=[len(r) for r in rows].count)
rows = [r for r in rows if len(r) == common]
print(f"{sys.argv[1]}: {len(rows)} steps of {common} kernels outside the layers; "
      f"step {statistics.median(period):.1f} us")
print(f"  first layer kernel starts {statistics.median(first):8.2f} us, last one ends {statistics.median(last):8.2f} us")
for i in range(common):
    name = rows[0][i][0]
    s = statistics.median(r[i][1] for r in rows)
    e = statistics.median(r[i][2] for r in rows)
    print(f"  {i:2d} {name:24s} start {s:8.2f}  end {e:8.2f}  dur {e - s:7.2f}")
