#!/usr/bin/env python3
"""Where a decoding layer's time goes in a trace (`groundrl bench rollout --profile DIR`'s
generate.json): for every layer within a step (from one gate|up kernel's start to the next one's),
the kernels in launch order, each with its start and end relative to the layer's start and its
duration; printed as medians over the layers, with the layer's period. Kernels started early
(dependent launches) show a start before the previous kernel's end. Standard library only.

Usage: layer_timeline.py generate.json [more.json ...]
"""
import json
import statistics
import sys


def short(name):
    for key in ("gate_up_swiglu", "split_product", "prompt_attention", "decode_attention",
                "add_rms_norm", "decode_rotary", "rms_norm", "sample", "nvjet"):
        if key in name:
            return name[name.index("nvjet"):][:40] if key == "nvjet" else key
    return name[:40]


for path in sys.argv[1:]:
    events = json.load(open(path))["traceEvents"]
    kernels = sorted((e for e in events if e.get("cat") == "kernel" and "dur" in e), key=lambda e: e["ts"])
    marks = [i for i, e in enumerate(kernels) if "gate_up_swiglu" in e["name"]]
    periods = [kernels[b]["ts"] - kernels[a]["ts"] for a, b in zip(marks, marks[1:])]
    typical = statistics.median(periods)
    rows = {}
    for a, b in zip(marks, marks[1:]):
        t0 = kernels[a]["ts"]
        if kernels[b]["ts"] - t0 > 2 * typical:
            continue  # the step's head and sampler lie between
        for position, e in enumerate(kernels[a:b]):
            rows.setdefault((position, short(e["name"])), []).append(
                (e["ts"] - t0, e["ts"] + e["dur"] - t0, e["dur"]))
    print(path)
    print(f"  layer period median {typical:.2f} us over {len(periods)} layers")
    print(f"  {'#':>2} {'kernel':40} {'start':>8} {'end':>8} {'dur':>8}  (us, medians, n)")
    for (position, name), spans in sorted(rows.items()):
        med = [statistics.median(s[k] for s in spans) for k in range(3)]
        print(f"  {position:2} {name:40} {med[0]:8.2f} {med[1]:8.2f} {med[2]:8.2f}  {len(spans)}")
