#!/usr/bin/env python3
"""Times candidate kernels for the decoding step's attention on the GPU, in isolation (CUDA graphs,
36 layers' worth per replay): one new query per row over a static cache, grouped KV heads, the
Qwen2.5-VL-3B shape (16 query heads, 2 KV heads, head dim 128) at batch 64 and 1,390 cached columns.
It checks each candidate's output against the masked SDPA call the engine makes, and prints
microseconds per layer and the bandwidth reached on the keys and values.

Usage: decode_attention.py [--rows 64] [--capacity 1390] [--filled 1326]
"""
import argparse

import torch
import torch.nn.functional as F


def timed(fn, layers=36, replays=20):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        torch.cuda.synchronize()
        with torch.cuda.graph(g):
            for _ in range(layers):
                out = fn()
    torch.cuda.current_stream().wait_stream(s)
    g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        g.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / replays / layers, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--capacity", type=int, default=1390)
    ap.add_argument("--filled", type=int, default=1326)
    a = ap.parse_args()
    dev, dt = "cuda", torch.bfloat16
    rows, kvh, groups, hd, cap = a.rows, 2, 8, 128, a.capacity
    torch.manual_seed(0)
    q = torch.randn(rows, kvh, groups, hd, device=dev, dtype=dt)
    k = torch.randn(rows, kvh, cap, hd, device=dev, dtype=dt)
    v = torch.randn(rows, kvh, cap, hd, device=dev, dtype=dt)
    valid = torch.arange(cap, device=dev) < a.filled
    bias = torch.zeros(rows, 1, 1, cap, device=dev, dtype=dt).masked_fill(~valid, float("-inf"))
    kv_bytes = 2 * rows * kvh * a.filled * hd * 2
    scale = hd ** -0.5

    def sdpa_masked():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)

    reference = sdpa_masked().float()
    results = {}

    def report(name, fn):
        try:
            us, out = timed(fn)
            err = (out.float().reshape(reference.shape) - reference).abs().max().item()
            results[name] = us
            print(f"{name:<44}{us:>9.1f} us/layer {kv_bytes / us / 1e3:>8.0f} GB/s  max|diff| {err:.3g}")
        except Exception as e:  # noqa: BLE001
            print(f"{name:<44} failed: {str(e).splitlines()[0][:100]}")

    report("sdpa, additive mask (engine today)", sdpa_masked)
    # The engine's queries are a slice of the rotated q|k rows: strided in the row dimension.
    qk = torch.randn(rows, 18, hd, device=dev, dtype=dt)
    q_strided = qk.narrow(1, 0, 16).view(rows, kvh, groups, hd)
    out = F.scaled_dot_product_attention(q_strided, k, v, attn_mask=bias)
    print(f"output of strided queries: shape {tuple(out.shape)} strides {out.stride()} "
          f"contiguous {out.is_contiguous()}, transpose(1, 2) contiguous {out.transpose(1, 2).is_contiguous()}")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        F.scaled_dot_product_attention(q_strided, k, v, attn_mask=bias)
        torch.cuda.synchronize()
    print("kernels of one call with strided queries:", [e.name[:60] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA])
    for backend in ["CUDNN_ATTENTION", "EFFICIENT_ATTENTION", "MATH"]:
        def forced(backend=backend):
            with torch.nn.attention.sdpa_kernel(getattr(torch.nn.attention.SDPBackend, backend)):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        report(f"sdpa forced {backend.lower()}", forced)

    # The filled prefix only, no mask (what a length-aware kernel reads).
    kf, vf = k[:, :, : a.filled], v[:, :, : a.filled]
    report("sdpa on the filled prefix, no mask", lambda: F.scaled_dot_product_attention(q, kf, vf))

    # Plain matmuls: f32 scores, masked softmax, bf16 probabilities times values.
    bias32 = bias.float().expand(rows, kvh, 1, cap).reshape(rows * kvh, 1, cap).contiguous()
    q3, k3, v3 = q.reshape(rows * kvh, groups, hd), k.reshape(rows * kvh, cap, hd), v.reshape(rows * kvh, cap, hd)

    def matmuls_bf16():
        s = torch.bmm(q3, k3.transpose(1, 2), out_dtype=torch.float32) * scale + bias32
        return torch.bmm(s.softmax(-1).to(dt), v3)

    report("bmm(out f32) + mask + softmax + bmm", matmuls_bf16)

    # Split the keys into chunks as extra heads, merge the chunks by their log-sum-exp.
    for splits in [2, 4, 8]:
        if cap % splits:
            continue
        c = cap // splits
        kS = k.view(rows, kvh * splits, c, hd)
        vS = v.view(rows, kvh * splits, c, hd)
        qS = q.unsqueeze(2).expand(rows, kvh, splits, groups, hd).reshape(rows, kvh * splits, groups, hd).contiguous()
        bS = bias.view(rows, 1, splits, c).expand(rows, kvh, splits, c).reshape(rows, kvh * splits, 1, c).contiguous()

        def split(kS=kS, vS=vS, qS=qS, bS=bS, splits=splits):
            out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(qS, kS, vS, bS, True)[:2]
            out = out.view(rows, kvh, splits, groups, hd).float()
            w = lse.view(rows, kvh, splits, groups).softmax(2)
            return (out * w.unsqueeze(-1)).sum(2).to(dt)

        report(f"efficient attention, keys split {splits}x, lse merge", split)

    # Varlen flash attention over per-row lengths (keys laid out (rows * cap, kv heads, hd)).
    kt = k.transpose(1, 2).contiguous().view(rows * cap, kvh, hd)
    vt = v.transpose(1, 2).contiguous().view(rows * cap, kvh, hd)
    qt = q.reshape(rows, kvh * groups, hd)
    cu_q = torch.arange(rows + 1, device=dev, dtype=torch.int32)
    cu_k = torch.arange(rows + 1, device=dev, dtype=torch.int32) * cap
    used = torch.full((rows,), a.filled, device=dev, dtype=torch.int32)

    def flash_varlen():
        out = torch.ops.aten._flash_attention_forward(qt, kt, vt, cu_q, cu_k, 1, cap, 0.0, False, False, seqused_k=used)[0]
        return out.view(rows, kvh, groups, hd)

    report("flash varlen, seqused_k (keys row-major)", flash_varlen)
    kb = k.transpose(1, 2).contiguous()
    vb = v.transpose(1, 2).contiguous()
    qb = q.reshape(rows, 1, kvh * groups, hd)

    def flash_dense_prefix():
        out = torch.ops.aten._flash_attention_forward(qb, kb[:, : a.filled], vb[:, : a.filled], None, None, 1, a.filled, 0.0, False, False)[0]
        return out.view(rows, kvh, groups, hd)

    report("flash dense on the filled prefix (B, L, H, D)", flash_dense_prefix)


if __name__ == "__main__":
    main()
