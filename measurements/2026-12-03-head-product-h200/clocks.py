#!/usr/bin/env python3
"""Summarizes nvidia-smi samples (timestamp, utilization %, SM MHz, memory MHz, power W, temperature C,
throttle reasons) taken while the GPU was busy (utilization at least 90%): their count, the SM clock's
median and range, the power's median and largest, the temperature's largest, and each throttle-reason
mask's share of the samples. Standard library only.

Usage: clocks.py samples.csv
"""
import collections
import statistics
import sys

rows = []
for line in open(sys.argv[1]):
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < 7:
        continue
    try:
        util, sm, mem, power, temp = int(parts[1]), int(parts[2]), int(parts[3]), float(parts[4]), int(parts[5])
    except ValueError:
        continue
    if util >= 90:
        rows.append((sm, mem, power, temp, parts[6]))
if not rows:
    print("no busy samples")
    sys.exit()
sm = [r[0] for r in rows]
power = [r[2] for r in rows]
reasons = collections.Counter(r[4] for r in rows)
print(f"{len(rows)} busy samples: SM {statistics.median(sm)} MHz ({min(sm)}-{max(sm)}), memory "
      f"{statistics.median(r[1] for r in rows)} MHz, power median {statistics.median(power):.0f} W "
      f"(largest {max(power):.0f}), temperature up to {max(r[3] for r in rows)} C; throttle reasons "
      + ", ".join(f"{k} {100 * v / len(rows):.0f}%" for k, v in reasons.most_common()))
