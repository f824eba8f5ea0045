"""Times sampling kernels (`groundrl_launch_sample` of each lib*.so given) at 64 and 256 rows of
Qwen's 151,936 bf16 logits (randn x 3), temperature 1, one banned token: each timing is a CUDA graph
of 40 launches replayed five times, the median per launch, with the logits of one buffer (in L2) and
of four cycled (not). Each line also says how many of the rows' tokens equal the first library's
and the largest log-prob difference from it (a draw within rounding of a boundary between two
tokens can go either way when the sums run in another order).

    python3 bench.py LIB.so [LIB.so ...]

ROWS (say ROWS="32 64 128 256") times other batch sizes than 64 and 256.
"""

import ctypes
import os
import sys

import torch

VOCAB, LAUNCHES = 151936, 40


def kernel(path):
    f = ctypes.CDLL(path).groundrl_launch_sample
    f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64] + [ctypes.c_void_p] * 7
    return f


def per_launch(graph):
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / LAUNCHES)
    return sorted(times)[2]


for rows in [int(r) for r in os.environ.get("ROWS", "64 256").split()]:
    buffers = [torch.randn(rows, VOCAB, device="cuda").mul(3).bfloat16() for _ in range(4)]
    temperature = torch.ones(rows, device="cuda")
    greedy = torch.zeros(rows, dtype=torch.bool, device="cuda")
    banned = torch.zeros(VOCAB, dtype=torch.bool, device="cuda")
    banned[151643] = True
    uniforms = torch.rand(rows, device="cuda")
    tokens = torch.empty(rows, dtype=torch.int64, device="cuda")
    logprobs = torch.empty(rows, device="cuda")
    first = None
    for path in sys.argv[1:]:
        f = kernel(path)

        def run(logits):
            f(logits.data_ptr(), 1, rows, VOCAB, temperature.data_ptr(), greedy.data_ptr(),
              banned.data_ptr(), uniforms.data_ptr(), tokens.data_ptr(), logprobs.data_ptr(),
              torch.cuda.current_stream().cuda_stream)

        timings = []
        for cycle in (1, 4):
            for i in range(20):
                run(buffers[i % cycle])
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for i in range(LAUNCHES):
                    run(buffers[i % cycle])
            graph.replay()
            torch.cuda.synchronize()
            timings.append(per_launch(graph))
        run(buffers[0])
        torch.cuda.synchronize()
        if first is None:
            first = (tokens.clone(), logprobs.clone())
        same = int((tokens == first[0]).sum())
        gap = float((logprobs - first[1]).abs().max())
        print(f"rows {rows:4d}  {path.split('/')[-1]:14s} in L2 {timings[0]:7.1f} us   cycled "
              f"{timings[1]:7.1f} us  same tokens as the first {same}/{rows}, largest log-prob "
              f"difference {gap:.2e}", flush=True)
