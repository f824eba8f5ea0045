"""Times the output head's product of a decoding step, logits = x W^T in bf16 for a batch of rows:
libtorch's `linear` into a kept tensor (cuBLAS, as `logits_into` ran it before head_product.cu) and
`groundrl_launch_head_product` of each library given (head_product.cu built alone), each a CUDA graph
of 20 launches replayed five times, the median per launch. Each kernel line also says how many logits
differ from cuBLAS's and the largest difference in bf16 units of the logit.

    python3 bench.py LIB.so [LIB.so ...]
"""

import ctypes
import sys

import torch

LAUNCHES = 20
SHAPES = [  # (rows, hidden, vocab, what)
    (64, 2048, 151936, "3B, batch 64"),
    (32, 2048, 151936, "3B, batch 32"),
    (8, 2048, 151936, "3B, batch 8"),
    (64, 2560, 151936, "Qwen3-VL 4B, batch 64"),
    (64, 3584, 152064, "7B, batch 64"),
]


def kernel(path):
    f = ctypes.CDLL(path).groundrl_launch_head_product
    f.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_int64] * 4 + [
        ctypes.c_void_p
    ]
    f.restype = ctypes.c_int
    return f


def per_launch(run):
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(LAUNCHES):
            run()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / LAUNCHES)
    return sorted(times)[2]


torch.manual_seed(0)
print(f"{'shape':24} {'product':14} {'us':>8} {'TB/s':>6}  logits differing from cuBLAS's")
for rows, hidden, vocab, what in SHAPES:
    x = torch.randn(rows, hidden, device="cuda").bfloat16()
    weight = (torch.randn(vocab, hidden, device="cuda") * 0.02).bfloat16()
    gigabytes = weight.numel() * 2 / 1e9
    want = torch.empty(rows, vocab, device="cuda", dtype=torch.bfloat16)
    us = per_launch(lambda: torch.mm(x, weight.t(), out=want))
    print(f"{what:24} {'cuBLAS':14} {us:8.2f} {gigabytes / us * 1e3:6.2f}")
    for path in sys.argv[1:]:
        f = kernel(path)
        got = torch.full((rows, vocab), float("nan"), device="cuda", dtype=torch.bfloat16)

        def run():
            code = f(x.data_ptr(), hidden, weight.data_ptr(), got.data_ptr(), vocab, rows, hidden, vocab,
                     torch.cuda.current_stream().cuda_stream)
            assert code == 0, code

        run()
        torch.cuda.synchronize()
        differ = (got != want).sum().item()
        units = ((got.float() - want.float()).abs() / (want.float().abs() * 2**-7).clamp_min(1e-30)).max().item()
        us = per_launch(run)
        name = path.rsplit("/", 1)[-1]
        print(f"{what:24} {name:14} {us:8.2f} {gigabytes / us * 1e3:6.2f}  {differ} of {rows * vocab}, "
              f"at most {units:.2f} units")
