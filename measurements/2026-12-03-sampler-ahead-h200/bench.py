"""Times the decoding step's sampler as the step launches it (`groundrl_launch_select` of each
lib*.so given: the step's record, StepOut in sampling.cu) at 64 and 256 rows of Qwen's 151,936 bf16
logits (randn x 3), temperature 1, one banned token, 128 steps' uniforms, step index 37, no row ended,
no stop id met: each timing a CUDA graph of 40 launches replayed five times, the median per launch,
with the logits of one buffer (in L2) and of four cycled (not). Each line also says how many tokens
equal the first library's and the largest log-prob difference from it.

    python3 bench.py LIB.so [LIB.so ...]

ROWS (say ROWS="32 64 128 256") times other batch sizes than 64 and 256.
"""

import ctypes
import os
import sys

import torch

VOCAB, LAUNCHES, STEPS = 151936, 40, 128


def kernel(path):
    f = ctypes.CDLL(path).groundrl_launch_select
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    f.argtypes = [p, ctypes.c_int, i64, i64, p, p, p, p, i64, p, p, p, i64, p, i64, p, p, p, p]
    f.restype = ctypes.c_int
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
    cuda = {"device": "cuda"}
    buffers = [torch.randn(rows, VOCAB, **cuda).mul(3).bfloat16() for _ in range(4)]
    temperature = torch.ones(rows, **cuda)
    greedy = torch.zeros(rows, dtype=torch.bool, **cuda)
    banned = torch.zeros(VOCAB, dtype=torch.bool, **cuda)
    banned[151643] = True
    uniforms = torch.rand(rows, STEPS, **cuda)
    index = torch.tensor([37], dtype=torch.int64, **cuda)
    finished = torch.zeros(rows, dtype=torch.bool, **cuda)
    stops = torch.full((rows, 1), -1, dtype=torch.int64, **cuda)
    limits = torch.full((rows,), STEPS, dtype=torch.int64, **cuda)
    table_tokens = torch.zeros(rows, STEPS, dtype=torch.int64, **cuda)
    table_logprobs = torch.zeros(rows, STEPS, **cuda)
    next_tokens = torch.zeros(rows, dtype=torch.int64, **cuda)
    first = None
    for path in sys.argv[1:]:
        f = kernel(path)

        def run(logits):
            code = f(logits.data_ptr(), 1, rows, VOCAB, temperature.data_ptr(), greedy.data_ptr(),
                     banned.data_ptr(), uniforms.data_ptr(), STEPS, index.data_ptr(), finished.data_ptr(),
                     stops.data_ptr(), 1, limits.data_ptr(), 0, table_tokens.data_ptr(),
                     table_logprobs.data_ptr(), next_tokens.data_ptr(), torch.cuda.current_stream().cuda_stream)
            assert code == 0, code

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
        tokens, logprobs = table_tokens[:, 37].clone(), table_logprobs[:, 37].clone()
        assert bool((tokens == next_tokens).all()) and not bool(finished.any())
        if first is None:
            first = (tokens, logprobs)
        same = int((tokens == first[0]).sum())
        gap = float((logprobs - first[1]).abs().max())
        print(f"rows {rows:4d}  {path.split('/')[-1]:14s} in L2 {timings[0]:7.1f} us   cycled "
              f"{timings[1]:7.1f} us  same tokens as the first {same}/{rows}, largest log-prob "
              f"difference {gap:.2e}", flush=True)
