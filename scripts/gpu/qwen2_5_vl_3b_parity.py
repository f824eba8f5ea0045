"""bf16 parity of groundrl's Qwen2.5-VL with HF transformers on the full 3B shape (random init), GPU.

Steps (run by scripts/gpu/run.sh on the GPU machine):
  1. `groundrl model init --preset 3b` has written a random-init 3B folder (our save path).
  2. This script loads that folder with transformers (so transformers reading our files is checked at
     full size), builds one screenshot-sized prompt (grid 1x52x94 = 1222 image tokens, 1262 tokens in
     all) and writes it as inputs.safetensors, then runs HF in bf16 and in f32 (TF32 off).
  3. `groundrl model logits` runs our model in bf16 on the same inputs.
  4. `--compare` prints max |ours_bf16 - hf_f32|, max |hf_bf16 - hf_f32| and max |ours_bf16 - hf_bf16|,
     each also relative to max |hf_f32|, and the share of positions whose argmax token agrees.

Usage: python qwen2_5_vl_3b_parity.py --model DIR --work DIR [--compare]
"""

import argparse
import json
import os

import torch
from safetensors.torch import load_file, save_file
from transformers import Qwen2_5_VLForConditionalGeneration

GRID = [1, 52, 94]


def make_inputs(config, work):
    gen = torch.Generator().manual_seed(0)
    tokens = GRID[0] * GRID[1] * GRID[2] // 4
    text = lambda n: torch.randint(0, 151000, (n,), generator=gen).tolist()
    ids = text(20) + [config.vision_start_token_id] + [config.image_token_id] * tokens + \
        [config.vision_end_token_id] + text(18)
    input_ids = torch.tensor([ids])
    inputs = {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "pixel_values": torch.randn(GRID[0] * GRID[1] * GRID[2], 1176, generator=gen),
        "image_grid_thw": torch.tensor([GRID]),
    }
    save_file(inputs, os.path.join(work, "inputs.safetensors"))
    return inputs


def hf_logits(model_dir, inputs, dtype):
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(model_dir, dtype=dtype, device_map="cuda").eval()
    mm = (inputs["input_ids"] == model.config.image_token_id).int()
    with torch.no_grad():
        out = model(input_ids=inputs["input_ids"].cuda(), attention_mask=inputs["attention_mask"].cuda(),
                    pixel_values=inputs["pixel_values"].cuda().to(dtype), image_grid_thw=inputs["image_grid_thw"].cuda(),
                    mm_token_type_ids=mm.cuda()).logits.float().cpu()
    del model
    torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--compare", action="store_true")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if not args.compare:
        from transformers import AutoConfig
        config = AutoConfig.from_pretrained(args.model)
        inputs = make_inputs(config, args.work)
        save_file({"bf16": hf_logits(args.model, inputs, torch.bfloat16),
                   "f32": hf_logits(args.model, inputs, torch.float32)},
                  os.path.join(args.work, "hf_logits.safetensors"))
        print(f"hf: tokens {inputs['input_ids'].shape[1]}, logits written")
        return
    hf = load_file(os.path.join(args.work, "hf_logits.safetensors"))
    ours = load_file(os.path.join(args.work, "ours_logits.safetensors"))["logits"]
    ref, hf16 = hf["f32"], hf["bf16"]
    scale = ref.abs().max().item()
    row = lambda name, a, b: {"pair": name, "max_abs": (a - b).abs().max().item(),
                              "max_rel_to_max": (a - b).abs().max().item() / scale,
                              "argmax_agree": (a.argmax(-1) == b.argmax(-1)).float().mean().item()}
    report = [row("ours_bf16 vs hf_f32", ours, ref), row("hf_bf16 vs hf_f32", hf16, ref),
              row("ours_bf16 vs hf_bf16", ours, hf16)]
    print(json.dumps({"tokens": ref.shape[1], "max_abs_hf_f32": scale, "pairs": report}, indent=1))


if __name__ == "__main__":
    main()
