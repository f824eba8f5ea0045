"""Times skinny.cu's matmul (libskinny.so) against torch's cuBLAS calls of the engine's decoding step
for the 3B decoder's four products at 64 rows, in one process: each timing is a CUDA graph of 40
launches cycling eight copies of the weights (none in L2 when read again), replayed five times, the
median per launch. Errors are the largest |result - f32 product| over the largest |f32 product|.

    python3 skinny_bench.py LIBSKINNY.so
"""

import ctypes
import statistics
import sys

import torch

lib = ctypes.CDLL(sys.argv[1])
lib.skinny_linear_launch.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                     ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int,
                                     ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                     ctypes.c_void_p]
VARIANTS = {0: "BN128 4w 4st", 1: "BN128 8w 4st", 2: "BN64 4w 4st", 3: "BN64 8w 6st",
            4: "BN128 8w 6st", 5: "BN192 6w 4st"}
COPIES, LAUNCHES = 8, 40
dev = "cuda"


def ours(variant, splits, x, w, y, bias, accumulate):
    stream = torch.cuda.current_stream().cuda_stream
    rc = lib.skinny_linear_launch(variant, x.data_ptr(), x.stride(0), w.data_ptr(), y.data_ptr(),
                                  y.stride(0), bias.data_ptr() if bias is not None else None,
                                  int(accumulate), x.size(0), w.size(0), x.size(1), splits, stream)
    if rc != 0:
        raise RuntimeError(f"skinny_linear_launch: {rc}")


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
    ("q|k|v", 2560, 2048, "linear", True, False,
     [(0, 8), (1, 8), (1, 4), (2, 4), (3, 4), (2, 8), (3, 8)]),
    ("o_proj", 2048, 2048, "addmm", False, True,
     [(0, 8), (1, 8), (2, 4), (2, 8), (3, 8), (1, 16)]),
    ("gate|up", 22016, 2048, "mm", False, False,
     [(0, 1), (1, 1), (4, 1), (5, 1), (2, 1), (1, 2)]),
    ("down_proj", 2048, 11008, "addmm", False, True,
     [(0, 8), (1, 8), (4, 8), (2, 8), (3, 8), (1, 16), (0, 16), (5, 12)]),
]

torch.manual_seed(0)
props = torch.cuda.get_device_properties(0)
print(f"{props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}")
print(f"{'product':10} {'kernel':22} {'splits':>6} {'blocks':>6} {'us':>7} {'TB/s':>6} {'error':>9}")
for name, n, k, kind, has_bias, accumulate, tries in SHAPES:
    ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(COPIES)]
    x = torch.randn(64, k, device=dev, dtype=torch.bfloat16)
    bias = torch.randn(n, device=dev, dtype=torch.bfloat16) * 0.1 if has_bias else None
    y0 = torch.randn(64, n, device=dev, dtype=torch.bfloat16)
    reference = x.float() @ ws[0].float().t()
    if has_bias:
        reference += bias.float()
    if accumulate:
        reference += y0.float()
    gb = n * k * 2 / 1e9

    err = error(engine(kind, x, ws[0], y0.clone(), bias), reference)
    y = y0.clone()
    us = timed(lambda i: engine(kind, x, ws[i], y, bias))
    print(f"{name:10} {'cuBLAS (torch)':22} {'':>6} {'':>6} {us:7.2f} {gb / us * 1e3:6.2f} {err:9.2e}")
    for variant, splits in tries:
        bn = {0: 128, 1: 128, 2: 64, 3: 64, 4: 128, 5: 192}[variant]
        blocks = splits * -(-n // bn)
        y = y0.clone()
        try:
            ours(variant, splits, x, ws[0], y, bias, accumulate)
            torch.cuda.synchronize()
        except RuntimeError as e:
            print(f"{name:10} {VARIANTS[variant]:22} {splits:6} {blocks:6} failed: {e}")
            continue
        err = error(y, reference)
        y = y0.clone()
        us = timed(lambda i: ours(variant, splits, x, ws[i], y, bias, accumulate))
        print(f"{name:10} {VARIANTS[variant]:22} {splits:6} {blocks:6} {us:7.2f} {gb / us * 1e3:6.2f} {err:9.2e}")
    del ws
    torch.cuda.empty_cache()

# Fewer rows than 64 and a strided x: results only.
w = torch.randn(2560, 2048, device=dev, dtype=torch.bfloat16) * 0.02
for rows in (1, 8, 37):
    big = torch.randn(rows, 4096, device=dev, dtype=torch.bfloat16)
    x = big[:, 1024:3072]
    y = torch.full((rows, 2560), float("nan"), device=dev, dtype=torch.bfloat16)
    ours(1, 8, x, w, y, None, False)
    print(f"rows {rows}, x strided: error {error(y, x.float() @ w.float().t()):.2e}, "
          f"nan {torch.isnan(y).sum().item()}")
