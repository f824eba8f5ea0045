#!/usr/bin/env python3
"""Times candidate kernels for the decoding step's attention on the GPU, in isolation (CUDA graphs,
36 layers' worth per replay): one new query per row over a static cache, grouped KV heads, the
Qwen2.5-VL-3B shape (16 query heads, 2 KV heads, head dim 128) at batch 64 and 1,390 cached columns.
It checks each candidate's output against the masked SDPA call the engine makes, and prints
microseconds per layer and the bandwidth reached on the keys and values.

It then times the layout that shares each prompt's cached prefix among its samples: keys and values
(prompts, kv heads, prefix + n x steps, head dim), each sample's generated tokens interleaved after the
prefix, the n samples' queries of a prompt attending together under a mask that shows each its own
tokens (checked against the same attention over per-row copies of the cache).

Usage: decode_attention.py [--rows 64] [--capacity 1390] [--filled 1326] [--n 8] [--prefix 1262] [--step 64]
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
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--prefix", type=int, default=1262)
    ap.add_argument("--step", type=int, default=64)
    a = ap.parse_args()
    shared_prefix(a)
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


def shared_prefix(a):
    """The shared-prefix layout at generation step `a.step` of 128."""
    dev, dt = "cuda", torch.bfloat16
    kvh, groups, hd, n = 2, 8, 128, a.n
    prompts = a.rows // n
    cap = (a.prefix + n * 127 + 63) // 64 * 64
    torch.manual_seed(1)
    q = torch.randn(a.rows, kvh, groups, hd, device=dev, dtype=dt)
    k = torch.randn(prompts, kvh, cap, hd, device=dev, dtype=dt)
    v = torch.randn(prompts, kvh, cap, hd, device=dev, dtype=dt)
    col = torch.arange(cap, device=dev)
    rel = col - a.prefix
    owner = torch.where(rel >= 0, rel % n, -1)
    seen = (rel < 0) | ((rel // n) <= a.step)
    allowed = seen & ((owner == -1) | (owner == torch.arange(n, device=dev)[:, None]))  # (n, cap)
    bias = torch.zeros(n, cap, device=dev, dtype=dt).masked_fill(~allowed, float("-inf"))
    bias_q = bias[None, None, :, None, :].expand(prompts, 1, n, groups, cap).reshape(prompts, 1, n * groups, cap).contiguous()
    # Reference: every row with its own copy of its prompt's cache and its own mask.
    expand = torch.arange(prompts, device=dev).repeat_interleave(n)
    bias_rows = bias.repeat(prompts, 1).view(a.rows, 1, 1, cap)
    reference = F.scaled_dot_product_attention(q, k[expand], v[expand], attn_mask=bias_rows).float()
    filled = a.prefix + n * (a.step + 1)
    kv_bytes = 2 * prompts * kvh * filled * hd * 2
    print(f"-- shared prefix: {prompts} prompts x {n} samples, {cap} columns, step {a.step} ({filled} filled per prompt)")

    def grouped(backend=None):
        qg = q.view(prompts, n, kvh, groups, hd).permute(0, 2, 1, 3, 4).reshape(prompts, kvh, n * groups, hd)
        if backend is None:
            out = F.scaled_dot_product_attention(qg, k, v, attn_mask=bias_q)
        else:
            with torch.nn.attention.sdpa_kernel(getattr(torch.nn.attention.SDPBackend, backend)):
                out = F.scaled_dot_product_attention(qg, k, v, attn_mask=bias_q)
        return out.view(prompts, kvh, n, groups, hd).permute(0, 2, 1, 3, 4).reshape(a.rows, kvh, groups, hd)

    def report(name, fn):
        try:
            us, out = timed(fn)
            err = (out.float() - reference).abs().max().item()
            print(f"{name:<44}{us:>9.1f} us/layer {kv_bytes / us / 1e3:>8.0f} GB/s  max|diff| {err:.3g}")
        except Exception as e:  # noqa: BLE001
            print(f"{name:<44} failed: {str(e).splitlines()[0][:100]}")

    report("grouped sdpa + regroup copies", grouped)
    for backend in ["CUDNN_ATTENTION", "EFFICIENT_ATTENTION"]:
        report(f"grouped forced {backend.lower()}", lambda b=backend: grouped(b))
    qg = q.view(prompts, n, kvh, groups, hd).permute(0, 2, 1, 3, 4).reshape(prompts, kvh, n * groups, hd)
    us, _ = timed(lambda: F.scaled_dot_product_attention(qg, k, v, attn_mask=bias_q).view(prompts, kvh, n, groups, hd))
    print(f"{'grouped sdpa alone (no copies)':<44}{us:>9.1f} us/layer")
    def split_keys(kernel, splits):
        """The keys split into `splits` chunks as extra heads, the chunks merged by their log-sum-exps."""
        c = cap // splits
        kS, vS = k.view(prompts, kvh * splits, c, hd), v.view(prompts, kvh * splits, c, hd)
        bS = bias_q.view(prompts, 1, n * groups, splits, c).permute(0, 1, 3, 2, 4).expand(prompts, kvh, splits, n * groups, c)
        bS = bS.reshape(prompts, kvh * splits, n * groups, c).contiguous()

        def run():
            qg = q.view(prompts, n, kvh, groups, hd).permute(0, 2, 1, 3, 4).reshape(prompts, kvh, 1, n * groups, hd)
            qS = qg.expand(prompts, kvh, splits, n * groups, hd).reshape(prompts, kvh * splits, n * groups, hd)
            out, lse = kernel(qS, kS, vS, bS)
            lse = lse.reshape(prompts, kvh * splits, -1)[..., : n * groups].reshape(prompts, kvh, splits, n * groups)
            w = lse.softmax(2).unsqueeze(-1)
            out = (out.view(prompts, kvh, splits, n * groups, hd).float() * w).sum(2).to(dt)
            return out.view(prompts, kvh, n, groups, hd).permute(0, 2, 1, 3, 4).reshape(a.rows, kvh, groups, hd)

        return run

    with_lse = {
        "efficient": lambda q, k, v, b: torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, b, True)[:2],
        "cudnn": lambda q, k, v, b: torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, b, True, 0.0, False, False)[:2],
    }
    for name, split_counts in [("efficient", [2, 4, 8]), ("cudnn", [4, 8, 16])]:
        for splits in split_counts:
            if cap % splits == 0 and (cap // splits) % 16 == 0:
                report(f"grouped {name}, keys split {splits}x, lse", split_keys(with_lse[name], splits))

    # Two flash calls (varlen, start offsets and seqused_k): every row's query heads over its
    # prompt's prefix (left-padded rows of (prompts * prefix capacity, kv heads, hd)), and over its own
    # generated tokens ((rows * steps, kv heads, hd)), merged by their log-sum-exps.
    pre_cap = (a.prefix + 63) // 64 * 64
    kp = torch.randn(prompts, pre_cap, kvh, hd, device=dev, dtype=dt)
    vp = torch.randn(prompts, pre_cap, kvh, hd, device=dev, dtype=dt)
    ks = torch.randn(a.rows, 128, kvh, hd, device=dev, dtype=dt)
    vs = torch.randn(a.rows, 128, kvh, hd, device=dev, dtype=dt)
    i32 = dict(device=dev, dtype=torch.int32)
    pad = pre_cap - a.prefix
    cu_qp = torch.arange(prompts + 1, **i32) * n
    cu_kp = torch.arange(prompts + 1, **i32) * pre_cap + pad
    used_p = torch.full((prompts,), a.prefix, **i32)
    cu_qs = torch.arange(a.rows + 1, **i32)
    cu_ks = torch.arange(a.rows + 1, **i32) * 128
    used_s = torch.full((a.rows,), a.step + 1, **i32)
    q16 = q.view(a.rows, kvh * groups, hd)
    new_k = torch.randn(a.rows, kvh, 1, hd, device=dev, dtype=dt)
    column = torch.tensor([a.step], device=dev)

    def two_flash():
        ks.index_copy_(1, column, new_k.transpose(1, 2))
        vs.index_copy_(1, column, new_k.transpose(1, 2))
        op, lp = torch.ops.aten._flash_attention_forward(q16, kp.view(-1, kvh, hd), vp.view(-1, kvh, hd), cu_qp, cu_kp,
                                                         n, pre_cap, 0.0, False, False, seqused_k=used_p)[:2]
        os_, ls = torch.ops.aten._flash_attention_forward(q16, ks.view(-1, kvh, hd), vs.view(-1, kvh, hd), cu_qs, cu_ks,
                                                          1, 128, 0.0, False, False, seqused_k=used_s)[:2]
        w = (lp - ls).sigmoid().to(dt).t().unsqueeze(-1)
        return torch.lerp(os_, op, w)

    out = two_flash()
    _, lp = torch.ops.aten._flash_attention_forward(q16, kp.view(-1, kvh, hd), vp.view(-1, kvh, hd), cu_qp, cu_kp,
                                                    n, pre_cap, 0.0, False, False, seqused_k=used_p)[:2]
    print("varlen flash: out", tuple(out.shape), "lse", tuple(lp.shape), lp.dtype)
    # Reference for the two-flash layout: every row's keys = its prompt's real prefix + its own tokens.
    expand = torch.arange(prompts, device=dev).repeat_interleave(n)
    kr = torch.cat([kp[expand, pad:], ks[:, : a.step + 1]], 1).transpose(1, 2)
    vr = torch.cat([vp[expand, pad:], vs[:, : a.step + 1]], 1).transpose(1, 2)
    ref2 = F.scaled_dot_product_attention(q, kr, vr, enable_gqa=True).float().view(a.rows, kvh * groups, hd)
    us, out = timed(two_flash)
    print(f"{'two varlen flash + lse merge (+ cache write)':<44}{us:>9.1f} us/layer  max|diff| {(out.float() - ref2).abs().max().item():.3g}")
    us, _ = timed(lambda: torch.ops.aten._flash_attention_forward(q16, kp.view(-1, kvh, hd), vp.view(-1, kvh, hd), cu_qp, cu_kp,
                                                                  n, pre_cap, 0.0, False, False, seqused_k=used_p)[:2])
    print(f"{'  of which the prefix call':<44}{us:>9.1f} us/layer")
    us, _ = timed(lambda: torch.ops.aten._flash_attention_forward(q16, ks.view(-1, kvh, hd), vs.view(-1, kvh, hd), cu_qs, cu_ks,
                                                                  1, 128, 0.0, False, False, seqused_k=used_s)[:2])
    print(f"{'  of which the suffix call':<44}{us:>9.1f} us/layer")

    # The same two calls with each KV head's query heads as query positions (no GQA in the kernel):
    # queries laid out (rows, groups, kv heads, hd), one copy shared by both calls.
    qg = torch.empty(a.rows, groups, kvh, hd, device=dev, dtype=dt)
    cu_qpg = torch.arange(prompts + 1, **i32) * n * groups
    cu_qsg = torch.arange(a.rows + 1, **i32) * groups
    out_rows = torch.empty(a.rows, kvh, groups, hd, device=dev, dtype=dt)

    def two_flash_grouped():
        ks.index_copy_(1, column, new_k.transpose(1, 2))
        vs.index_copy_(1, column, new_k.transpose(1, 2))
        qg.copy_(q.transpose(1, 2))
        qv = qg.view(-1, kvh, hd)
        op, lp = torch.ops.aten._flash_attention_forward(qv, kp.view(-1, kvh, hd), vp.view(-1, kvh, hd), cu_qpg, cu_kp,
                                                         n * groups, pre_cap, 0.0, False, False, seqused_k=used_p)[:2]
        os_, ls = torch.ops.aten._flash_attention_forward(qv, ks.view(-1, kvh, hd), vs.view(-1, kvh, hd), cu_qsg, cu_ks,
                                                          groups, 128, 0.0, False, False, seqused_k=used_s)[:2]
        w = (lp - ls).sigmoid().to(dt).t().unsqueeze(-1)
        merged = torch.lerp(os_, op, w)
        out_rows.transpose(1, 2).copy_(merged.view(a.rows, groups, kvh, hd))
        return out_rows

    us, out = timed(two_flash_grouped)
    print(f"{'two varlen flash, grouped queries, merge':<44}{us:>9.1f} us/layer  max|diff| {(out.float().view(a.rows, kvh * groups, hd) - ref2).abs().max().item():.3g}")
    qv = qg.view(-1, kvh, hd)
    us, _ = timed(lambda: torch.ops.aten._flash_attention_forward(qv, kp.view(-1, kvh, hd), vp.view(-1, kvh, hd), cu_qpg, cu_kp,
                                                                  n * groups, pre_cap, 0.0, False, False, seqused_k=used_p)[:2])
    print(f"{'  of which the prefix call':<44}{us:>9.1f} us/layer")
    us, _ = timed(lambda: torch.ops.aten._flash_attention_forward(qv, ks.view(-1, kvh, hd), vs.view(-1, kvh, hd), cu_qsg, cu_ks,
                                                                  groups, 128, 0.0, False, False, seqused_k=used_s)[:2])
    print(f"{'  of which the suffix call':<44}{us:>9.1f} us/layer")
    # Dense (not varlen) flash on the grouped prefix, for comparison (no padding possible).
    qd = qg.view(prompts, n * groups, kvh, hd)
    us, _ = timed(lambda: torch.ops.aten._flash_attention_forward(qd, kp, vp, None, None, n * groups, pre_cap, 0.0, False, False)[:2])
    print(f"{'  dense flash on the grouped prefix':<44}{us:>9.1f} us/layer")

    # The prefix alone, unmasked, split into chunks as extra heads (what a cascade's shared part reads).
    pre = (a.prefix + 63) // 64 * 64
    for splits in [1, 4, 10, 20]:
        c = pre // splits
        if pre % splits:
            continue
        kP = k[:, :, :pre].contiguous().view(prompts, kvh * splits, c, hd)
        vP = v[:, :, :pre].contiguous().view(prompts, kvh * splits, c, hd)
        qS = q.view(prompts, n, kvh, 1, groups, hd).permute(0, 2, 3, 1, 4, 5).expand(prompts, kvh, splits, n, groups, hd)
        qS = qS.reshape(prompts, kvh * splits, n * groups, hd).contiguous()

        def prefix_flash(kP=kP, vP=vP, qS=qS):
            return torch.ops.aten._scaled_dot_product_flash_attention(qS, kP, vP)[:2]

        us, _ = timed(prefix_flash)
        print(f"{f'prefix {pre} unmasked flash, split {splits}x':<44}{us:>9.1f} us/layer (attention only, no merge)")


if __name__ == "__main__":
    main()
