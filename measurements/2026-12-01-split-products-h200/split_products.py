"""The decoding step's four products of the 3B decoder (q|k|v with its bias, o_proj and down_proj
added into a residual as the engine's `addmm_` does, gate|up) at ROWS rows (default 64), weights
cycled over 8 copies so that none is read from L2, each in a CUDA graph of 36 calls
(scripts/bench/decode_attention.py's `timed`): the engine's libtorch call against the same product
as k-slices' f32 partial products in one `torch.bmm(..., out_dtype=torch.float32)` (1-16 slices),
and `torch.mm(..., out_dtype=torch.float32)`. Prints microseconds a call and the weights' bandwidth.

Usage (from the repository root): python3 measurements/2026-12-01-split-products-h200/split_products.py [ROWS]"""
import itertools, sys
import torch
sys.path.insert(0, "scripts/bench")
from decode_attention import timed

dev, dt, rows = "cuda", torch.bfloat16, int(sys.argv[1]) if len(sys.argv) > 1 else 64
torch.manual_seed(0)
shapes = {"qkv": (2560, 2048), "o_proj": (2048, 2048), "down": (2048, 11008), "gate_up": (22016, 2048)}
for name, (n, k) in shapes.items():
    ws = [torch.randn(n, k, device=dev, dtype=dt) * 0.02 for _ in range(8)]
    bias = torch.randn(n, device=dev, dtype=dt)
    x = torch.randn(rows, k, device=dev, dtype=dt)
    acc = torch.randn(rows, n, device=dev, dtype=dt)
    cyc = itertools.cycle(range(8))
    def engine():
        w = ws[next(cyc)]
        if name == "qkv":
            return torch.nn.functional.linear(x, w, bias)
        return acc.addmm_(x, w.t())
    us, _ = timed(engine)
    print(f"{name:<8} engine call          {us:7.2f} us  {n*k*2/us/1e3:6.0f} GB/s", flush=True)
    for s in (1, 2, 3, 4, 6, 8, 12, 16):
        if k % s or (k // s) % 8:
            continue
        kk = k // s
        def split():
            w = ws[next(cyc)]
            a = x.view(rows, s, kk).transpose(0, 1)          # (s, rows, kk)
            b = w.view(n, s, kk).permute(1, 2, 0)            # (s, kk, n)
            return torch.bmm(a, b, out_dtype=torch.float32)
        try:
            us, _ = timed(split)
            print(f"{name:<8} bmm f32 split {s:<3}     {us:7.2f} us  {n*k*2/us/1e3:6.0f} GB/s", flush=True)
        except Exception as e:
            print(f"{name:<8} split {s} failed: {str(e).splitlines()[0][:100]}")
    # mm with out_dtype (one fp32 output)
    def mmf():
        w = ws[next(cyc)]
        return torch.mm(x, w.t(), out_dtype=torch.float32)
    try:
        us, _ = timed(mmf); print(f"{name:<8} mm f32 out           {us:7.2f} us", flush=True)
    except Exception as e:
        print(f"{name:<8} mm f32 failed: {str(e).splitlines()[0][:100]}")
    del ws
    torch.cuda.empty_cache()
