"""Parity goldens for groundrl's Qwen2.5-VL: tiny random-init models made and run by HF transformers.

For each tiny config it writes, under crates/groundrl-tensor/tests/fixtures/qwen2_5_vl/<name>/:
  config.json, model.safetensors  the model as transformers' save_pretrained writes it (bf16 weights, run as f32)
  inputs.safetensors              input_ids, attention_mask, mm_token_type_ids, pixel_values (bf16-exact,
                                  stored as bf16), image_grid_thw
  expected.safetensors            position_ids, rope_deltas, vision_out (merged image features, HF order),
                                  logits (f32, every position; padded positions are not compared)
The two configs exercise: window padding (merged grids that are not multiples of the window), full-attention
blocks, several images in one row, left padding, a text-only row, GQA, tied and untied embeddings.

Run with transformers 5.17 and torch 2.11 (the GPU machine has both; so does scripts/hf-env.sh's venv):
  "$(scripts/hf-env.sh)" scripts/goldens/qwen2_5_vl.py [--out DIR] [--device cpu|cuda]
Everything runs in float32 with TF32 off, so CPU and GPU goldens agree to float rounding.
"""

import argparse
import json
import math
import os

import torch
import transformers
from safetensors.torch import save_file
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

VOCAB = 384
IMAGE, VIDEO, VSTART, VEND = 380, 381, 378, 379

CONFIGS = {
    # Window 112 px = 4x4 merged tokens; grids 10x14 and 4x6 patches need window padding; blocks 1 and 3
    # attend over the whole image; GQA 2:1; separate lm_head.
    "tiny_a": dict(
        text=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                          "mrope_section": [2, 3, 3]}, rms_norm_eps=1e-6),
        vision=dict(depth=4, hidden_size=32, intermediate_size=48, num_heads=2, window_size=112,
                    fullatt_block_indexes=[1, 3], out_hidden_size=32),
        tie=False,
        grids=[[1, 10, 14], [1, 4, 6], [1, 16, 8]],
    ),
    # Window 56 px = 2x2 merged tokens; one full-attention block first; tied embeddings; 4 heads, no GQA.
    "tiny_b": dict(
        text=dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=4, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                                          "mrope_section": [2, 3, 3]}, rms_norm_eps=1e-5),
        vision=dict(depth=3, hidden_size=48, intermediate_size=64, num_heads=3, window_size=56,
                    fullatt_block_indexes=[0], out_hidden_size=64),
        tie=True,
        grids=[[1, 6, 10], [1, 2, 2], [1, 8, 14]],
    ),
}


def make_config(spec):
    text = dict(vocab_size=VOCAB, max_position_embeddings=4096, hidden_act="silu", bos_token_id=None,
                eos_token_id=VEND - 2, pad_token_id=None, tie_word_embeddings=spec["tie"], **spec["text"])
    vision = dict(patch_size=14, temporal_patch_size=2, spatial_merge_size=2, in_channels=3, hidden_act="silu",
                  tokens_per_second=2, **spec["vision"])
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, image_token_id=IMAGE, video_token_id=VIDEO,
                            vision_start_token_id=VSTART, vision_end_token_id=VEND,
                            tie_word_embeddings=spec["tie"])


def randomize(model, gen):
    """Weights of unit-scale activations (HF's 0.02 init makes near-uniform logits, a weak test)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))
            elif "norm" in name or "ln_q" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))


def text(gen, n):
    return torch.randint(0, 370, (n,), generator=gen).tolist()


def rows(grids, merge=2):
    """Row 0: text, image 0, text, image 1, text. Row 1: text, image 2, text. Row 2: text only."""
    tokens = [g[0] * g[1] * g[2] // (merge * merge) for g in grids]
    gen = torch.Generator().manual_seed(7)
    image = lambda n: [VSTART] + [IMAGE] * n + [VEND]
    return [
        text(gen, 5) + image(tokens[0]) + text(gen, 4) + image(tokens[1]) + text(gen, 3),
        text(gen, 3) + image(tokens[2]) + text(gen, 6),
        text(gen, 20),
    ]


def left_pad(seqs, pad_id=0):
    width = max(len(s) for s in seqs)
    ids = torch.tensor([[pad_id] * (width - len(s)) + s for s in seqs])
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs])
    return ids, mask


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "../../crates/groundrl-tensor/tests/fixtures/qwen2_5_vl"))
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, device {args.device}")
    for name, spec in CONFIGS.items():
        out = os.path.join(args.out, name)
        os.makedirs(out, exist_ok=True)
        gen = torch.Generator().manual_seed(1234)
        model = Qwen2_5_VLForConditionalGeneration(make_config(spec))
        randomize(model, gen)
        # Stored in bf16 to keep fixtures small; both sides load it as f32 (so the bf16 -> f32 path is tested).
        model.to(torch.bfloat16).save_pretrained(out)
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(out, dtype=torch.float32).eval()
        model.to(args.device)

        grids = torch.tensor(spec["grids"])
        patches = int(grids.prod(-1).sum())
        # bf16-exact values, stored as bf16 (half the bytes) and used as f32.
        pixel_values = torch.randn(patches, 3 * 2 * 14 * 14, generator=gen).to(torch.bfloat16).float()
        ids, mask = left_pad(rows(spec["grids"]))
        mm = (ids == IMAGE).int()
        dev = lambda t: t.to(args.device)
        with torch.no_grad():
            position_ids, deltas = model.model.get_rope_index(dev(ids), dev(mm), image_grid_thw=dev(grids),
                                                               attention_mask=dev(mask))
            vision = model.model.visual(dev(pixel_values), grid_thw=dev(grids)).pooler_output
            logits = model(input_ids=dev(ids), attention_mask=dev(mask), pixel_values=dev(pixel_values),
                           image_grid_thw=dev(grids), mm_token_type_ids=dev(mm)).logits
            explicit = model(input_ids=dev(ids), attention_mask=dev(mask), pixel_values=dev(pixel_values),
                             image_grid_thw=dev(grids), position_ids=position_ids).logits
        real = mask.bool()
        agree = (logits.cpu()[real] - explicit.cpu()[real]).abs().max().item()
        save_file({"input_ids": ids, "attention_mask": mask, "mm_token_type_ids": mm.long(),
                   "pixel_values": pixel_values.to(torch.bfloat16).contiguous(), "image_grid_thw": grids},
                  os.path.join(out, "inputs.safetensors"))
        save_file({"position_ids": position_ids.cpu().contiguous(), "rope_deltas": deltas.cpu().contiguous(),
                   "vision_out": vision.cpu().contiguous(), "logits": logits.float().cpu().contiguous()},
                  os.path.join(out, "expected.safetensors"))
        with open(os.path.join(out, "golden.json"), "w") as f:
            json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                       "device": args.device, "dtype": "float32",
                       "logits_max_abs": logits.cpu()[real].abs().max().item(),
                       "mm_token_type_ids_vs_explicit_position_ids_max_diff": agree}, f, indent=1)
        print(f"{name}: ids {tuple(ids.shape)}, patches {patches}, vision_out {tuple(vision.shape)}, "
              f"logits |max| {logits.cpu()[real].abs().max().item():.3f}, "
              f"mm_token_type_ids vs explicit positions: max diff {agree:.2e}")


if __name__ == "__main__":
    main()
