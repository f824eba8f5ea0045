#!/usr/bin/env python3
"""Every decoding step's period in a profiled `bench rollout` trace (generate.json), from one sampler
kernel's start to the next: their count, sum, mean and median, the periods more than 20 us over the
median (with their step index), and, for the steps before and after each such period, what ran
between the last kernel of the one and the first of the other. Standard library only.

Usage: periods.py generate.json
"""
import json
import statistics
import sys

events = json.load(open(sys.argv[1]))["traceEvents"]
kernels = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e),
                 key=lambda e: e["ts"])
starts = [i for i, e in enumerate(kernels) if "sample" in e["name"]]
periods = [kernels[b]["ts"] - kernels[a]["ts"] for a, b in zip(starts, starts[1:])]
median = statistics.median(periods)
print(f"{sys.argv[1]}: {len(periods)} periods, sum {sum(periods):.1f} us, mean {statistics.mean(periods):.2f}, "
      f"median {median:.2f}")
long = [(i, p) for i, p in enumerate(periods) if p > median + 20]
print(f"  {len(long)} periods over the median + 20 us, {sum(p - median for _, p in long):.1f} us over it in all")
for i, p in long:
    a, b = starts[i], starts[i + 1]
    last = max(kernels[a:b], key=lambda e: e["ts"] + e["dur"])
    print(f"  step {i:3d}: {p:8.1f} us; last kernel ends {last['ts'] + last['dur'] - kernels[a]['ts']:8.1f} us "
          f"after the sampler's start ({last['name'][:50]})")
