#!/usr/bin/env python3
"""Per-layer and per-step periods of a decoding trace (`groundrl bench rollout --profile DIR`'s
generate.json): the time from one gate|up kernel's start to the next one's within a step (a layer,
with every gap between its kernels), and from one sampler kernel's start to the next (a decoding
step). Prints medians and quartiles in microseconds. Standard library only.

Usage: layer_period.py generate.json [more.json ...]
"""
import json
import statistics
import sys


def starts(kernels, key):
    return sorted(e["ts"] for e in kernels if key in e["name"])


def quartiles(values):
    q = statistics.quantiles(values, n=4)
    return f"median {statistics.median(values):8.2f} us  quartiles {q[0]:8.2f} {q[2]:8.2f}  (n={len(values)})"


for path in sys.argv[1:]:
    events = json.load(open(path))["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    layers = [b - a for a, b in zip(*(lambda s: (s, s[1:]))(starts(kernels, "gate_up_swiglu")))]
    steps = [b - a for a, b in zip(*(lambda s: (s, s[1:]))(starts(kernels, "sample")))]
    # A step's first layer follows the head and the sampler: keep the periods within a step.
    within = [p for p in layers if p < 2 * statistics.median(layers)]
    print(path)
    print("  layer", quartiles(within))
    print("  step ", quartiles(steps))
