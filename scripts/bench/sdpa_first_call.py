"""First-call cost of libtorch SDPA (forward + backward) at each new sequence length, per backend.

cuDNN builds a plan for every attention shape it has not seen; the flash kernels do not. Shapes of the
3B decoder (8 rows, 16 heads of 128, causal, bf16). Run on the GPU machine:
    /opt/torch/.venv/bin/python scripts/bench/sdpa_first_call.py
Each line: the first three calls at one sequence length, in milliseconds (host-timed, synchronised).
"""
import time, torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
dev = "cuda"
def run(L, b=8, h=16):
    q = torch.randn(b, h, L, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn_like(q, requires_grad=True); v = torch.randn_like(q, requires_grad=True)
    times = []
    for _ in range(3):
        torch.cuda.synchronize(); t = time.perf_counter()
        F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
        torch.cuda.synchronize(); times.append(round((time.perf_counter() - t) * 1e3, 2))
    return times
print("cudnn sdp enabled:", torch.backends.cuda.cudnn_sdp_enabled())
run(1000)
for L in [1300, 1301, 1302, 1364, 1365, 1300]:
    print("default L", L, "ms fwd+bwd, first three calls:", run(L))
for name, backend in [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]:
    with sdpa_kernel([backend]):
        for L in [1400, 1401, 1402]:
            print(name, "L", L, run(L))
