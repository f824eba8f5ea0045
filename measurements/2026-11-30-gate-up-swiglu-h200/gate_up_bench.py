"""The decoding step's gate|up product with SwiGLU (crates/groundrl-tensor/csrc/gate_up_swiglu.cu,
built alone into a shared library) against torch's cuBLAS product, alone and with silu * up after
it, in one process: CUDA graphs of 40 launches cycling eight copies of the weights (none in L2 when
read again), medians of five replays. Errors: largest |result - f32 composition| over the largest
|f32 composition|; "differ": bf16 values unequal to torch's bf16 composition (cuBLAS's sums run in
another order).

    python3 gate_up_bench.py LIBGATEUP.so
"""

import ctypes
import statistics
import sys

import torch

lib = ctypes.CDLL(sys.argv[1])
lib.groundrl_launch_gate_up_swiglu.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                               ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                               ctypes.c_int64, ctypes.c_void_p]
COPIES, LAUNCHES = 8, 40


def ours(x, w, out):
    rc = lib.groundrl_launch_gate_up_swiglu(x.data_ptr(), x.stride(0), w.data_ptr(), out.data_ptr(),
                                            x.size(0), x.size(1), out.size(1),
                                            torch.cuda.current_stream().cuda_stream)
    if rc != 0:
        raise RuntimeError(f"groundrl_launch_gate_up_swiglu: {rc}")


def composition(x, w, inter):
    gate_up = x.mm(w.t())
    return torch.nn.functional.silu(gate_up[:, :inter]) * gate_up[:, inter:]


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


def check(x, w, inter):
    out = torch.full((x.size(0), inter), float("nan"), device="cuda", dtype=torch.bfloat16)
    ours(x, w, out)
    want = composition(x, w, inter)
    xf, wf = x.float(), w.float()
    exact = torch.nn.functional.silu(xf @ wf[:inter].t()) * (xf @ wf[inter:].t())
    scale = exact.abs().max()
    return ((out.float() - exact).abs().max() / scale).item(), \
        ((want.float() - exact).abs().max() / scale).item(), \
        (out != want).sum().item(), out.numel(), torch.isnan(out).sum().item()


torch.manual_seed(0)
print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
print("shape (rows x hidden -> inter)      ours err  torch err  differ/total  nan")
for rows, hidden, inter, strided in [(64, 2048, 11008, False), (1, 2048, 11008, True),
                                     (8, 2048, 11008, True), (37, 2048, 11008, True),
                                     (64, 2560, 9728, False), (64, 512, 1000, False)]:
    w = torch.randn(2 * inter, hidden, device="cuda", dtype=torch.bfloat16) * 0.02
    big = torch.randn(rows, hidden + (1024 if strided else 0), device="cuda", dtype=torch.bfloat16)
    x = big[:, 512:512 + hidden] if strided else big
    e1, e2, differ, total, nan = check(x, w, inter)
    print(f"{rows:3} x {hidden:5} -> {inter:6}{' strided' if strided else '        '}  "
          f"{e1:9.2e} {e2:9.2e}  {differ:6}/{total:8}  {nan}")

print()
print("3B shape, 64 rows: us a launch")
inter, hidden = 11008, 2048
ws = [torch.randn(2 * inter, hidden, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(COPIES)]
x = torch.randn(64, hidden, device="cuda", dtype=torch.bfloat16)
out = torch.empty(64, inter, device="cuda", dtype=torch.bfloat16)
mm = timed(lambda i: x.mm(ws[i].t()))
both = timed(lambda i: composition(x, ws[i], inter))
fused = timed(lambda i: ours(x, ws[i], out))
print(f"cuBLAS gate|up product alone        {mm:7.2f} ({2 * inter * hidden * 2 / mm / 1e6:.2f} TB/s)")
print(f"cuBLAS product + torch silu, mul    {both:7.2f}")
print(f"gate_up_swiglu (one kernel)         {fused:7.2f} ({2 * inter * hidden * 2 / fused / 1e6:.2f} TB/s)")
