"""Times wgmma.cu's matmul (libwgmma.so, weights in its tiled layout) against torch's cuBLAS calls of
the engine's decoding step for the 3B decoder's four products at 64 rows, in one process: each timing
is a CUDA graph of 40 launches cycling eight copies of the weights (none in L2 when read again),
replayed five times, the median per launch. Errors are the largest |result - f32 product| over the
largest |f32 product|.

    python3 wgmma_bench.py LIBWGMMA.so
"""

import ctypes
import statistics
import sys

import torch

lib = ctypes.CDLL(sys.argv[1])
lib.wgmma_linear_launch.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                    ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int,
                                    ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                    ctypes.c_int, ctypes.c_void_p]
NAMES = {0: "BN168 4st", 1: "BN128 4st", 2: "BN168 7st", 3: "BN128 6st"}
COPIES, LAUNCHES = 8, 40


def tiled(w, bn):
    """w (n, k) in the kernel's layout: (band, chunk, bn rows, 8 pieces, 8), pieces permuted."""
    n, k = w.shape
    bands, chunks = -(-n // bn), k // 64
    padded = torch.zeros(bands * bn, k, device=w.device, dtype=w.dtype)
    padded[:n] = w
    v = padded.view(bands, bn, chunks, 8, 8).permute(0, 2, 1, 3, 4)
    r = torch.arange(bn, device=w.device)[:, None]
    piece = torch.arange(8, device=w.device)[None, :] ^ (r % 8)
    return v[:, :, r, piece].contiguous()


def ours(variant, splits, x, wt, n, y, bias, accumulate, probe=0):
    rc = lib.wgmma_linear_launch(variant, x.data_ptr(), x.stride(0), wt.data_ptr(), y.data_ptr(),
                                 y.stride(0), bias.data_ptr() if bias is not None else None,
                                 int(accumulate), x.size(0), n, x.size(1), splits, probe,
                                 torch.cuda.current_stream().cuda_stream)
    if rc != 0:
        raise RuntimeError(f"wgmma_linear_launch: {rc}")


def engine(kind, x, w, y, bias):
    """The engine's call for this product (crates/groundrl-tensor/src/decoder.rs, FusedLayer)."""
    if kind == "linear":
        return torch.nn.functional.linear(x, w, bias)
    if kind == "addmm":
        return y.addmm_(x, w.t())
    return x.mm(w.t())


def timed(call):
    for i in range(COPIES):
        call(i)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(LAUNCHES):
            call(i % COPIES)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop) * 1000 / LAUNCHES)
    return statistics.median(times)


def error(result, reference):
    return ((result.float() - reference).abs().max() / reference.abs().max()).item()


SHAPES = [  # name, n, k, engine call, bias, accumulate, (variant, splits) to try
    ("q|k|v", 2560, 2048, "linear", True, False, [(1, 8), (3, 8)]),
    ("o_proj", 2048, 2048, "addmm", False, True, [(1, 8), (3, 8)]),
    ("gate|up", 22016, 2048, "mm", False, False, [(0, 1), (2, 1)]),
    ("down_proj", 2048, 11008, "addmm", False, True, [(1, 8), (3, 8)]),
]
PROBES = {"gate|up": [(0, 1)], "down_proj": [(1, 8)], "q|k|v": [(1, 8)]}

torch.manual_seed(0)
print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
print(f"{'product':10} {'kernel':16} {'splits':>6} {'blocks':>6} {'us':>7} {'TB/s':>6} {'error':>9}")
for name, n, k, kind, has_bias, accumulate, tries in SHAPES:
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(COPIES)]
    x = torch.randn(64, k, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16) * 0.1 if has_bias else None
    y0 = torch.randn(64, n, device="cuda", dtype=torch.bfloat16)
    reference = x.float() @ ws[0].float().t()
    if has_bias:
        reference += bias.float()
    if accumulate:
        reference += y0.float()
    gb = n * k * 2 / 1e9
    err = error(engine(kind, x, ws[0], y0.clone(), bias), reference)
    y = y0.clone()
    us = timed(lambda i: engine(kind, x, ws[i], y, bias))
    print(f"{name:10} {'cuBLAS (torch)':16} {'':>6} {'':>6} {us:7.2f} {gb / us * 1e3:6.2f} {err:9.2e}")
    for variant, splits in tries:
        bn = lib.wgmma_band_rows(variant)
        wts = [tiled(w, bn) for w in ws]
        y = y0.clone()
        try:
            ours(variant, splits, x, wts[0], n, y, bias, accumulate)
            torch.cuda.synchronize()
            err = error(y, reference)
            y = y0.clone()
            us = timed(lambda i: ours(variant, splits, x, wts[i], n, y, bias, accumulate))
            print(f"{name:10} {NAMES[variant]:16} {splits:6} {splits * -(-n // bn):6} {us:7.2f} "
                  f"{gb / us * 1e3:6.2f} {err:9.2e}")
            if (variant, splits) in PROBES.get(name, []):
                for probe, what in ((1, "no wgmma"), (2, "no copies"), (5, "w copies only"),
                                    (4, "no x copies"), (8, "no stages"),
                                    (24, "nothing")):
                    us = timed(lambda i: ours(variant, splits, x, wts[i], n, y, bias, accumulate, probe))
                    print(f"{name:10} {'  ' + what:16} {splits:6} {'':6} {us:7.2f}")
        except RuntimeError as e:
            print(f"{name:10} {NAMES[variant]:16} {splits:6} failed: {e}")
        del wts
    del ws
    torch.cuda.empty_cache()

# Fewer rows than 64 and a strided x: results only.
w = torch.randn(2560, 2048, device="cuda", dtype=torch.bfloat16) * 0.02
wt = tiled(w, 128)  # variant 1
for rows in (1, 8, 37):
    big = torch.randn(rows, 4096, device="cuda", dtype=torch.bfloat16)
    x = big[:, 1024:3072]
    y = torch.full((rows, 2560), float("nan"), device="cuda", dtype=torch.bfloat16)
    ours(1, 8, x, wt, 2560, y, None, False)
    print(f"rows {rows}, x strided: error {error(y, x.float() @ w.float().t()):.2e}, "
          f"nan {torch.isnan(y).sum().item()}")
