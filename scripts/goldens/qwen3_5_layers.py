"""Goldens for groundrl's Qwen3.5 layers: transformers 5.17's `Qwen3_5GatedDeltaNet` (linear attention)
and `Qwen3_5Attention` (gated full attention, eager) with random parameters, on the CPU in float32.

Writes under crates/groundrl-tensor/tests/fixtures/qwen3_5/:
  linear_attention.safetensors  linear_attn.* (the layer's parameters under transformers' names); x (2, 70, 32);
                                mask (2, 70), 1 for a token, the second row left-padded by 5; out (2, 70, 32).
                                2 key heads serving 4 value heads, 70 tokens: a chunk of 64 and a partial one;
                                no cache (the whole-sequence path, the chunked rule)
  full_attention.safetensors    self_attn.* (parameters); x (2, 9, 32); cos, sin (2, 9, 4), the text rotary
                                tables of positions 0..8 (head_dim 16, partial_rotary_factor 0.25); out
                                (2, 9, 32) under a causal mask; 4 query heads over 2 KV heads, biases on
  text_model.json               that decoder's config as transformers writes a `text_config`
  text_model.safetensors        the text decoder's parameters (transformers' names under
                                `model.language_model`); ids (2, 70); hidden (2, 70, 32), the final normed
                                hidden states: 4 layers (3 linear attention, then full attention), no cache,
                                no padding, text positions

Run: "$(scripts/hf-env.sh)" scripts/goldens/qwen3_5_layers.py
"""

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers.models.qwen3_5 import modeling_qwen3_5 as m
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "crates/groundrl-tensor/tests/fixtures/qwen3_5"


def randomize(module):
    """Every parameter random, decay rates as transformers draws them, gains near 1."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(0.01, 16).log())
            elif name.endswith(("dt_bias", "linear_attn.norm.weight")) or name in ("dt_bias", "norm.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))


def save(name, prefix, module, **tensors):
    out = {f"{prefix}.{n}": p.detach().contiguous() for n, p in module.named_parameters()}
    out.update({n: t.contiguous() for n, t in tensors.items()})
    FIXTURES.mkdir(parents=True, exist_ok=True)
    save_file(out, str(FIXTURES / name))
    print(f"wrote {name}: {sorted(out)}")


def linear_attention():
    config = Qwen3_5TextConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                               head_dim=8, intermediate_size=64, vocab_size=64, linear_num_key_heads=2,
                               linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
                               linear_conv_kernel_dim=4, layer_types=["linear_attention"], rms_norm_eps=1e-6)
    layer = m.Qwen3_5GatedDeltaNet(config, layer_idx=0).eval()
    randomize(layer)
    x = torch.randn(2, 70, 32)
    mask = torch.ones(2, 70, dtype=torch.long)
    mask[1, :5] = 0
    with torch.no_grad():
        out = layer(x, attention_mask=mask)
    save("linear_attention.safetensors", "linear_attn", layer, x=x, mask=mask, out=out)


def full_attention():
    config = Qwen3_5TextConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                               head_dim=16, intermediate_size=64, vocab_size=64, attention_bias=True,
                               layer_types=["full_attention"], rms_norm_eps=1e-6,
                               rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                "partial_rotary_factor": 0.25, "mrope_section": [1, 1, 0],
                                                "mrope_interleaved": True})
    config._attn_implementation = "eager"
    layer = m.Qwen3_5Attention(config, layer_idx=0).eval()
    randomize(layer)
    x = torch.randn(2, 9, 32)
    positions = torch.arange(9).expand(3, 2, 9)
    cos, sin = m.Qwen3_5TextRotaryEmbedding(config)(x, positions)
    causal = torch.full((9, 9), float("-inf")).triu(1)[None, None]
    with torch.no_grad():
        out, _ = layer(x, (cos, sin), causal)
    save("full_attention.safetensors", "self_attn", layer, x=x, cos=cos, sin=sin, out=out)


def text_model():
    config = Qwen3_5TextConfig(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                               head_dim=16, intermediate_size=64, vocab_size=64, linear_num_key_heads=2,
                               linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
                               linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
                               layer_types=["linear_attention"] * 3 + ["full_attention"],
                               rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                "partial_rotary_factor": 0.25, "mrope_section": [1, 1, 0],
                                                "mrope_interleaved": True})
    config._attn_implementation = "eager"
    model = m.Qwen3_5TextModel(config).eval()
    randomize(model)
    ids = torch.randint(0, 64, (2, 70))
    with torch.no_grad():
        hidden = model(input_ids=ids, use_cache=False).last_hidden_state
    out = {n: p.detach().contiguous() for n, p in model.named_parameters()}
    out.update(ids=ids, hidden=hidden.contiguous())
    save_file(out, str(FIXTURES / "text_model.safetensors"))
    (FIXTURES / "text_model.json").write_text(json.dumps(config.to_dict(), indent=2, sort_keys=True) + "\n")
    print(f"wrote text_model.safetensors: {len(out)} tensors, and its config text_model.json")


if __name__ == "__main__":
    torch.manual_seed(0)
    linear_attention()
    torch.manual_seed(1)
    full_attention()
    torch.manual_seed(2)
    text_model()
