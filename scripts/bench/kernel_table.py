#!/usr/bin/env python3
"""Sums the CUDA kernels of a Chrome trace written by libtorch's profiler (`groundrl bench rollout
--profile DIR`, `groundrl bench train --profile FILE`): device time per kernel name and per kind
(matmul, attention, normalization, elementwise, ...), largest first. Standard library only.

Usage: kernel_table.py TRACE.json [--top N] [--per STEPS] [--subtract OTHER.json]
  --per STEPS divides the times by STEPS (e.g. the decoding steps of a generate trace) to show the
  time of one step. The us/call column is each kernel's mean duration.
  --subtract OTHER.json takes each kernel's time and calls in OTHER away first: `bench rollout
  --profile`'s prefill.json from its generate.json leaves the decoding steps, whose kernels that the
  prefill also runs (RMSNorm, SwiGLU) would otherwise average in the prefill's much larger calls.
"""
import argparse
import json
from collections import defaultdict

KINDS = [
    ("attention", ("fmha", "flash", "attention", "cudnn_generated_fort_native_sdpa", "sdpa")),
    ("matmul", ("gemm", "cutlass", "sm90_xmma", "nvjet", "cublas", "splitk", "gemv")),
    ("normalization", ("norm",)),
    ("softmax / sort / scan", ("softmax", "sort", "scan", "cumsum", "radix", "topk")),
    ("reduction", ("reduce",)),
    ("copy / index", ("copy", "index", "gather", "scatter", "cat", "memcpy", "memset")),
    ("elementwise", ("elementwise", "vectorized", "unrolled")),
]


def kind_of(name):
    low = name.lower()
    for kind, keys in KINDS:
        if any(k in low for k in keys):
            return kind
    return "other"


def short(name, width=110):
    name = name.replace("void ", "")
    return name if len(name) <= width else name[: width - 3] + "..."


def kernel_events(trace):
    events = json.load(open(trace))["traceEvents"]
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e]
    return events, kernels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--per", type=float, default=1.0)
    ap.add_argument("--subtract")
    a = ap.parse_args()
    events, kernels = kernel_events(a.trace)
    if not kernels:
        print(f"{a.trace}: no kernel events (was CUPTI available?)")
        return
    by_name, count = defaultdict(float), defaultdict(int)
    for e in kernels:
        by_name[e["name"]] += e["dur"]
        count[e["name"]] += 1
    if a.subtract:
        _, other = kernel_events(a.subtract)
        for e in other:
            by_name[e["name"]] -= e["dur"]
            count[e["name"]] -= 1
        for name in [n for n in by_name if count[n] <= 0 or by_name[n] <= 0]:
            del by_name[name], count[name]
        span = f" after subtracting {a.subtract}'s {len(other)} kernels"
    else:
        first = min(e["ts"] for e in kernels)
        last = max(e["ts"] + e["dur"] for e in kernels)
        span = f", span {(last - first) / 1e3 / a.per:.3f} ms"
    by_kind = defaultdict(float)
    for name, us in by_name.items():
        by_kind[kind_of(name)] += us
    total = sum(by_name.values())
    per = a.per
    print(f"{a.trace}: {sum(count.values())} kernels, busy {total / 1e3 / per:.3f} ms{span}"
          + (f" (per step, /{per:g})" if per != 1 else ""))
    print(f"{'kind':<24}{'ms':>10}{'share':>8}")
    for kind, us in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"{kind:<24}{us / 1e3 / per:>10.3f}{us / total:>8.1%}")
    print(f"{'ms':>9} {'share':>6} {'calls':>7} {'us/call':>8}  kernel")
    for name, us in sorted(by_name.items(), key=lambda kv: -kv[1])[: a.top]:
        print(f"{us / 1e3 / per:>9.3f} {us / total:>6.1%} {count[name] / per:>7.1f} {us / count[name]:>8.1f}  {short(name)}")
    # Host side: operators by inclusive time (nested ones count in their callers too), to spot host
    # work such as copies and concatenations of CPU tensors.
    ops, calls = defaultdict(float), defaultdict(int)
    for e in events:
        if e.get("cat") == "cpu_op" and "dur" in e:
            ops[e["name"]] += e["dur"]
            calls[e["name"]] += 1
    if ops:
        print(f"{'host ms':>9} {'calls':>7}  operator (inclusive)")
        for name, us in sorted(ops.items(), key=lambda kv: -kv[1])[:12]:
            print(f"{us / 1e3 / per:>9.3f} {calls[name] / per:>7.1f}  {short(name)}")


if __name__ == "__main__":
    main()
