#!/usr/bin/env python3
"""Sums the CUDA kernels of a Chrome trace written by libtorch's profiler (`groundrl bench rollout
--profile DIR`, `groundrl bench train --profile FILE`): device time per kernel name and per kind
(matmul, attention, normalization, elementwise, ...), largest first. Standard library only.

Usage: kernel_table.py TRACE.json [--top N] [--per STEPS]
  --per STEPS divides the times by STEPS (e.g. the decoding steps of a generate trace) to show the
  time of one step. The us/call column is each kernel's mean duration.
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--per", type=float, default=1.0)
    a = ap.parse_args()
    events = json.load(open(a.trace))["traceEvents"]
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e]
    if not kernels:
        print(f"{a.trace}: no kernel events (was CUPTI available?)")
        return
    by_name, by_kind, count = defaultdict(float), defaultdict(float), defaultdict(int)
    for e in kernels:
        by_name[e["name"]] += e["dur"]
        by_kind[kind_of(e["name"])] += e["dur"]
        count[e["name"]] += 1
    total = sum(by_name.values())
    first = min(e["ts"] for e in kernels)
    last = max(e["ts"] + e["dur"] for e in kernels)
    per = a.per
    print(f"{a.trace}: {len(kernels)} kernels, busy {total / 1e3 / per:.3f} ms, span {(last - first) / 1e3 / per:.3f} ms"
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
