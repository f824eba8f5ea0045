"""What holds skinny.cu's matmul (libskinny.so) at 64 rows: each variant timed as it is, without its
tensor-core work (probe 1), without reading x (probe 2), reading the weights alone (probe 3), and
with 16 copies of x, a copy a band (probe 4), beside torch's cuBLAS call; CUDA graphs of 40 launches
cycling eight copies of the weights, medians of five replays.

    python3 skinny_probe.py LIBSKINNY.so
"""

import ctypes
import statistics
import sys

import torch

lib = ctypes.CDLL(sys.argv[1])
lib.skinny_linear_launch.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                     ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int,
                                     ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                     ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int),
                                     ctypes.c_void_p]
VARIANTS = {0: (128, "BN128 4w 4x128B"), 1: (128, "BN128 8w 4x128B"), 2: (64, "BN64 4w 4x128B"),
            3: (64, "BN64 4w 3x256B"), 4: (128, "BN128 8w 3x256B"), 5: (64, "BN64 8w 4x128B"),
            6: (64, "BN64 8w 3x256B"), 7: (32, "BN32 4w 4x128B")}
COPIES, LAUNCHES = 8, 40


def ours(variant, splits, x, w, y, probe=0, x_copies=1, occupancy=None):
    rc = lib.skinny_linear_launch(variant, x.data_ptr(), x.stride(0), w.data_ptr(), y.data_ptr(),
                                  y.stride(0), None, 0, 64, w.size(0), x.size(1), splits, probe,
                                  x_copies, occupancy, torch.cuda.current_stream().cuda_stream)
    if rc != 0:
        raise RuntimeError(f"skinny_linear_launch: {rc}")


def occupancy(variant, x, w, y):
    blocks = ctypes.c_int(0)
    ours(variant, 1, x, w, y, occupancy=ctypes.byref(blocks))
    return blocks.value


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


SHAPES = [("gate|up", 22016, 2048, [(v, 1) for v in range(8)] + [(1, 2), (5, 2)]),
          ("down_proj", 2048, 11008, [(1, 8), (2, 8), (3, 8), (5, 8), (6, 8), (7, 8), (7, 4)]),
          ("q|k|v", 2560, 2048, [(1, 8), (2, 4), (3, 4), (5, 4), (7, 2), (7, 4)])]
torch.manual_seed(0)
print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
print(f"{'product':10} {'kernel':17} {'splits':>6} {'blocks':>6} {'/SM':>3} "
      f"{'us':>7} {'no mma':>7} {'no x':>7} {'w only':>7} {'16 x':>7}  TB/s")
for name, n, k, tries in SHAPES:
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(COPIES)]
    xs = torch.randn(16 * 64, k, device="cuda", dtype=torch.bfloat16)
    x = xs[:64]
    y = torch.empty(64, n, device="cuda", dtype=torch.bfloat16)
    gb = n * k * 2 / 1e9
    us = timed(lambda i: x.mm(ws[i].t()))
    print(f"{name:10} {'cuBLAS (torch)':17} {'':>6} {'':>6} {'':>3} {us:7.2f} {'':>7} {'':>7} {'':>7} {'':>7}  {gb / us * 1e3:.2f}")
    for variant, splits in tries:
        bn, label = VARIANTS[variant]
        row = [timed(lambda i: ours(variant, splits, x, ws[i], y, probe))
               for probe in (0, 1, 2, 3)]
        row.append(timed(lambda i: ours(variant, splits, xs, ws[i], y, 4, 16)))
        print(f"{name:10} {label:17} {splits:6} {splits * -(-n // bn):6} "
              f"{occupancy(variant, x, ws[0], y):3} " + " ".join(f"{t:7.2f}" for t in row)
              + f"  {gb / row[0] * 1e3:.2f}")
    del ws
    torch.cuda.empty_cache()
