"""Goldens for groundrl's gated delta rule (Qwen3.5's linear attention): transformers 5.17's reference
functions `torch_chunk_gated_delta_rule` (chunks of 64) and `torch_recurrent_gated_delta_rule`, on the
CPU in float32, L2-normalising queries and keys as Qwen3.5's layers ask them to.

Writes crates/groundrl-tensor/tests/fixtures/qwen3_5/gated_delta.safetensors:
  q, k (2, 70, 4, 16), v (2, 70, 4, 8), g, beta (2, 70, 4), state (2, 4, 16, 8): the inputs (g as a
      layer makes it, -exp(A_log) * softplus(a + dt_bias); beta a sigmoid)
  chunk_out, chunk_state      the chunked function's output and final state, from `state`
  recurrent_out, recurrent_state  the token-by-token function's, from `state`
70 tokens: one whole chunk of 64 and a partial one.

Run: "$(scripts/hf-env.sh)" scripts/goldens/qwen3_5_gated_delta.py
"""

from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers.models.qwen3_5 import modeling_qwen3_5 as m

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "crates/groundrl-tensor/tests/fixtures/qwen3_5/gated_delta.safetensors"


def main():
    torch.manual_seed(0)
    b, l, h, dk, dv = 2, 70, 4, 16, 8
    q, k = torch.randn(b, l, h, dk), torch.randn(b, l, h, dk)
    v = torch.randn(b, l, h, dv)
    a_log = torch.empty(h).uniform_(0.01, 16).log()
    g = -a_log.exp() * F.softplus(torch.randn(b, l, h) - 4.0)
    beta = torch.randn(b, l, h).sigmoid()
    state = torch.randn(b, h, dk, dv) * 0.1
    common = dict(initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True)
    chunk_out, chunk_state = m.torch_chunk_gated_delta_rule(q, k, v, g=g, beta=beta, chunk_size=64, **common)
    rec_out, rec_state = m.torch_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, **common)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tensors = dict(q=q, k=k, v=v, g=g, beta=beta, state=state, chunk_out=chunk_out, chunk_state=chunk_state,
                   recurrent_out=rec_out, recurrent_state=rec_state)
    save_file({name: t.contiguous() for name, t in tensors.items()}, str(OUT))
    print(f"wrote {OUT}: chunked vs recurrent max abs {float((chunk_out - rec_out).abs().max()):.3e}")


if __name__ == "__main__":
    main()
