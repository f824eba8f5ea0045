#!/usr/bin/env python3
"""Prints, for each named run of scripts/gpu/train-runs.sh, the medians of its steps after the first
(step, rollout, generation and update seconds, MFU by model FLOPs), its peak device memory and every step's time.

Usage: step_table.py RAW_DIR NAME [NAME ...]   (RAW_DIR holds NAME.metrics.jsonl)
"""
import json
import os
import statistics as st
import sys


def main():
    raw, names = sys.argv[1], sys.argv[2:]
    for name in names:
        path = f"{raw}/{name}.metrics.jsonl"
        if not os.path.exists(path):
            print(f"{name}: no metrics")
            continue
        rows = [json.loads(line).get("train") for line in open(path)][1:]
        rows = [r for r in rows if r is not None]
        if not rows:
            print(f"{name}: no step after the first")
            continue
        med = lambda key: st.median(r[key] for r in rows)
        peak = max(r.get("peak_memory_bytes", 0) for r in rows) / 2**30
        print(f"{name}: steps 2-{len(rows) + 1} step {med('time/step'):.3f} s, rollout {med('time/rollout'):.3f} "
              f"(generation {med('time/generate'):.3f}), "
              f"update {med('time/update'):.3f}, {med('mfu_model_flops'):.1%}, peak {peak:.2f} GiB; steps "
              + " ".join(f"{r['time/step']:.3f}" for r in rows))


if __name__ == "__main__":
    main()
