#!/usr/bin/env python3
"""Times the decoding step's matmuls of the Qwen2.5-VL-3B shape (one token per row, bf16) in CUDA
graphs, as the engine writes them (x @ W^T) and transposed (W @ x^T, the output read transposed), and
prints microseconds per call and the bandwidth reached on the weights.

Usage: decode_matmuls.py [--rows 64]
"""
import argparse

import torch

from decode_attention import timed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=64)
    rows = ap.parse_args().rows
    dev, dt = "cuda", torch.bfloat16
    shapes = {"qkv (2560 x 2048, bias)": (2560, 2048), "o_proj (2048 x 2048)": (2048, 2048),
              "gate_up (22016 x 2048)": (22016, 2048), "down (2048 x 11008)": (2048, 11008),
              "lm_head (151936 x 2048)": (151936, 2048)}
    for name, (n, k) in shapes.items():
        w = torch.randn(n, k, device=dev, dtype=dt) * 0.02
        x = torch.randn(rows, k, device=dev, dtype=dt)
        out = torch.empty(rows, n, device=dev, dtype=dt)
        out_t = torch.empty(n, rows, device=dev, dtype=dt)
        variants = {
            "x @ W^T": lambda: torch.mm(x, w.t(), out=out),
            "W @ x^T": lambda: torch.mm(w, x.t(), out=out_t),
            "x @ W^T (f32 acc out)": lambda: torch.mm(x, w.t(), out_dtype=torch.float32),
        }
        for label, fn in variants.items():
            try:
                us, _ = timed(fn)
                print(f"{name:<26}{label:<24}{us:>8.1f} us {n * k * 2 / us / 1e3:>8.0f} GB/s")
            except Exception as e:  # noqa: BLE001
                print(f"{name:<26}{label:<24} failed: {str(e).splitlines()[0][:80]}")


if __name__ == "__main__":
    main()
