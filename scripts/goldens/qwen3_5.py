"""Parity goldens for groundrl's whole Qwen3.5 model: a tiny random `Qwen3_5ForConditionalGeneration`
(vision tower of Qwen3-VL's kind without DeepStack, a hybrid decoder of linear and full attention),
made and run by HF transformers 5.17 on the CPU in float32.

Writes under crates/groundrl-tensor/tests/fixtures/qwen3_5/tiny/:
  config.json, model.safetensors  the model as save_pretrained writes it (bf16 weights, run as f32); also
                                  what groundrl's save must write back (names, dtypes, values)
  inputs.safetensors              input_ids, attention_mask (three left-padded rows: two images, one image,
                                  text only, the longest over one chunk of the delta rule), pixel_values
                                  (bf16-exact, stored as bf16), image_grid_thw
  expected.safetensors            position_ids (3, B, L): the M-RoPE positions; vision_out (merged image
                                  features); logits (f32, every position; padded ones are not compared);
                                  logits_bf16 (the same model loaded and run in bf16);
                                  generated (B, 6): greedy tokens of `generate` with its cache (the
                                  recurrent rule and the convolution state step by step)

Run: "$(scripts/hf-env.sh)" scripts/goldens/qwen3_5.py
"""

import json
import math
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file
from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "crates/groundrl-tensor/tests/fixtures/qwen3_5/tiny"

# The tiny tokenizer's vocabulary and ids (crates/groundrl-tensor/src/processor/tiny_tokenizer.rs), so that
# the rollout engine can batch the prompts with its processor: 640 text tokens, <|endoftext|> (also the
# padding) at 640, the vision markers at 649 and 650, the image and video placeholders at 652 and 653.
VOCAB = 662
VSTART, VEND, IMAGE, VIDEO = 649, 650, 652, 653
PAD = 640
TEXT_IDS = 640
GRIDS = [[1, 4, 6], [1, 2, 2], [1, 6, 4]]

# Linear and full attention alternating (two of each), head_dim 16 turned on its first 8 dims
# (partial_rotary_factor 0.5, M-RoPE sections 2 + 1 + 1 of the 4 frequencies), GQA 4:2, 2 key heads
# serving 4 value heads; a 2-block tower with patch 16 on an 8x8 position grid; separate lm_head.
TEXT = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, attention_bias=False, rms_norm_eps=1e-6,
            layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
            linear_conv_kernel_dim=4, max_position_embeddings=4096, eos_token_id=[VOCAB - 1],
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                             "mrope_section": [2, 1, 1], "mrope_interleaved": True})
VISION = dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=2, patch_size=16, temporal_patch_size=2,
              spatial_merge_size=2, in_channels=3, num_position_embeddings=64, out_hidden_size=32)


def randomize(model, gen):
    """Activations of order one (HF's 0.02 init makes near-uniform logits, a weak test), weights at 0.6 of
    unit scale (at unit scale the hybrid stack amplifies rounding: its bf16 logits moved 24% from f32 in
    transformers itself); decay rates as transformers draws them; zero-centred norms near 0."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(0.01, 16, generator=gen).log())
            elif p.dim() >= 2:
                fan_in = p[0].numel()
                p.copy_(0.6 * torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))
            elif name.endswith("dt_bias") or ("visual" in name and "norm" in name and name.endswith("weight")):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))


def rows(gen):
    """Row 0: text, image 0, text, image 1, text. Row 1: text, image 2, text. Row 2: 75 text tokens."""
    tokens = [g[0] * g[1] * g[2] // 4 for g in GRIDS]
    text = lambda n: torch.randint(0, TEXT_IDS, (n,), generator=gen).tolist()
    image = lambda n: [VSTART] + [IMAGE] * n + [VEND]
    return [
        text(5) + image(tokens[0]) + text(4) + image(tokens[1]) + text(3),
        text(3) + image(tokens[2]) + text(6),
        text(75),
    ]


def left_pad(seqs, pad_id=PAD):
    width = max(len(s) for s in seqs)
    ids = torch.tensor([[pad_id] * (width - len(s)) + s for s in seqs])
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs])
    return ids, mask


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    OUT.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(1234)
    config = Qwen3_5Config(text_config=TEXT, vision_config=VISION, image_token_id=IMAGE, video_token_id=VIDEO,
                           vision_start_token_id=VSTART, vision_end_token_id=VEND, tie_word_embeddings=False)
    model = Qwen3_5ForConditionalGeneration(config)
    randomize(model, gen)
    # Stored in bf16 to keep the fixture small; both sides load it as f32.
    model.to(torch.bfloat16).save_pretrained(OUT)
    model = Qwen3_5ForConditionalGeneration.from_pretrained(OUT, dtype=torch.float32).eval()

    grids = torch.tensor(GRIDS)
    patches = int(grids.prod(-1).sum())
    pixel_values = torch.randn(patches, 3 * 2 * 16 * 16, generator=gen).to(torch.bfloat16).float()
    ids, mask = left_pad(rows(gen))
    mm = (ids == IMAGE).int()
    with torch.no_grad():
        position_ids, _ = model.model.get_rope_index(ids, mm, image_grid_thw=grids, attention_mask=mask)
        vision = model.model.visual(pixel_values, grid_thw=grids).pooler_output
        logits = model(input_ids=ids, attention_mask=mask, pixel_values=pixel_values, image_grid_thw=grids,
                       mm_token_type_ids=mm).logits
        generated = model.generate(input_ids=ids, attention_mask=mask, pixel_values=pixel_values,
                                   image_grid_thw=grids, mm_token_type_ids=mm, max_new_tokens=6, do_sample=False,
                                   eos_token_id=None, pad_token_id=PAD)[:, ids.shape[1]:]
    bf16 = Qwen3_5ForConditionalGeneration.from_pretrained(OUT, dtype=torch.bfloat16).eval()
    with torch.no_grad():
        logits_bf16 = bf16(input_ids=ids, attention_mask=mask, pixel_values=pixel_values.to(torch.bfloat16),
                           image_grid_thw=grids, mm_token_type_ids=mm).logits.float()
    save_file({"input_ids": ids, "attention_mask": mask,
               "pixel_values": pixel_values.to(torch.bfloat16).contiguous(), "image_grid_thw": grids},
              OUT / "inputs.safetensors")
    save_file({"position_ids": position_ids.contiguous(), "vision_out": vision.contiguous(),
               "logits": logits.float().contiguous(), "logits_bf16": logits_bf16.to(torch.bfloat16).contiguous(),
               "generated": generated.contiguous()},
              OUT / "expected.safetensors")
    real = mask.bool()
    (OUT / "golden.json").write_text(json.dumps({
        "transformers": transformers.__version__, "torch": torch.__version__, "device": "cpu", "dtype": "float32",
        "logits_max_abs": logits[real].abs().max().item()}, indent=1) + "\n")
    print(f"ids {tuple(ids.shape)}, patches {patches}, vision_out {tuple(vision.shape)}, "
          f"logits |max| {logits[real].abs().max().item():.3f}, HF bf16 against f32 "
          f"{((logits_bf16 - logits)[real].abs().max() / logits[real].abs().max()).item():.3e}, "
          f"generated {generated.tolist()}")


if __name__ == "__main__":
    main()
