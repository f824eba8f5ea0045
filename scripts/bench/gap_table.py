#!/usr/bin/env python3
"""Where the GPU waits in a Chrome trace of libtorch's profiler (`trainer.profile_step`): the idle
time between consecutive kernels, each gap charged to the host operator that launched the kernel
after it (the innermost CPU operator around that launch's CUDA runtime call, and the outermost one),
and the CUDA runtime calls that block the host longest (synchronisations, pageable copies). The
profiler slows the host, so gaps are larger than in an unprofiled step; their places are what counts.
Standard library only.

Usage: gap_table.py TRACE.json [--min-us 5] [--top 15]
"""
import argparse
import json
from collections import defaultdict


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--min-us", type=float, default=5.0)
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    events = json.load(open(a.trace))["traceEvents"]
    kernels = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                      and "dur" in e), key=lambda e: e["ts"])
    runtime = {e["args"]["correlation"]: e for e in events
               if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    ops = sorted((e for e in events if e.get("cat") == "cpu_op" and "dur" in e), key=lambda e: e["ts"])
    if not kernels:
        print(f"{a.trace}: no kernel events")
        return
    gaps = []  # (launch time, launching thread, idle us) of each kernel after a gap
    total, end = 0.0, kernels[0]["ts"] + kernels[0]["dur"]
    for k in kernels[1:]:
        gap = k["ts"] - end
        end = max(end, k["ts"] + k["dur"])
        if gap < a.min_us:
            continue
        total += gap
        launch = runtime.get(k.get("args", {}).get("correlation"))
        gaps.append((launch["ts"], launch.get("tid")) + (gap,) if launch else (None, None, gap))
    # One sweep in time order keeps each thread's stack of open host operators (they nest).
    inner, outer = defaultdict(float), defaultdict(float)
    stacks, i = defaultdict(list), 0
    for ts, tid, gap in sorted(gaps, key=lambda g: (g[0] is not None, g[0] or 0)):
        stack = []
        if ts is not None:
            while i < len(ops) and ops[i]["ts"] <= ts:
                op = ops[i]
                open_ops = stacks[op.get("tid")]
                while open_ops and open_ops[-1]["ts"] + open_ops[-1]["dur"] < op["ts"]:
                    open_ops.pop()
                open_ops.append(op)
                i += 1
            stack = stacks[tid]
            while stack and stack[-1]["ts"] + stack[-1]["dur"] < ts:
                stack.pop()
        inner[stack[-1]["name"] if stack else "(no host operator)"] += gap
        outer[stack[0]["name"] if stack else "(no host operator)"] += gap
    count = len(gaps)
    span = end - kernels[0]["ts"]
    print(f"{a.trace}: span {span / 1e3:.3f} ms, GPU idle {total / 1e3:.3f} ms in {count} gaps of "
          f">= {a.min_us:g} us ({total / span:.1%} of the span)")
    for title, table in (("innermost host operator launching the kernel after a gap", inner),
                         ("outermost host operator", outer)):
        print(f"{'idle ms':>9}  {title}")
        for name, us in sorted(table.items(), key=lambda kv: -kv[1])[: a.top]:
            print(f"{us / 1e3:>9.3f}  {name[:110]}")
    calls, blocked = defaultdict(int), defaultdict(float)
    for e in events:
        if e.get("cat") == "cuda_runtime" and "dur" in e:
            calls[e["name"]] += 1
            blocked[e["name"]] += e["dur"]
    print(f"{'host ms':>9} {'calls':>7}  CUDA runtime call")
    for name, us in sorted(blocked.items(), key=lambda kv: -kv[1])[:8]:
        print(f"{us / 1e3:>9.3f} {calls[name]:>7}  {name}")


if __name__ == "__main__":
    main()
