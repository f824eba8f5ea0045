"""bf16 parity of groundrl's model with HF transformers on a released shape (random init), GPU.

Any family (the folder's `model_type` decides: Qwen2.5-VL, Qwen3-VL or Qwen3.5). Steps (scripts/gpu/run.sh
`parity` and `parity3` run them on the GPU machine):
  1. `groundrl model init --preset 3b` (or `qwen3-4b`, `qwen3-8b`) has written a random-init folder
     (our save path).
  2. This script loads that folder with transformers (so transformers reading our files is checked at
     full size), builds one screenshot-sized prompt of `--grid` patches (20 text tokens, the image, 18
     text tokens) and writes it as inputs.safetensors, then runs HF in bf16 and in f32 (TF32 off).
  3. `groundrl model logits` runs our model in bf16 on the same inputs.
  4. `--compare` prints max |ours_bf16 - hf_f32|, max |hf_bf16 - hf_f32| and max |ours_bf16 - hf_bf16|,
     each also relative to max |hf_f32|, and the share of positions whose argmax token agrees.

Usage: python bf16_parity.py --model DIR --work DIR [--grid 1x52x94] [--compare]
"""

import argparse
import json
import os

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForImageTextToText


def make_inputs(config, grid, work):
    gen = torch.Generator().manual_seed(0)
    vision = config.vision_config
    merge = vision.spatial_merge_size
    tokens = grid[0] * grid[1] * grid[2] // (merge * merge)
    patch_dim = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
    # Ordinary text ids, within a small vocabulary's range too (the demo presets' tiny tokenizer).
    vocab = getattr(config, "text_config", config).vocab_size
    text = lambda n: torch.randint(0, min(151000, vocab), (n,), generator=gen).tolist()
    ids = text(20) + [config.vision_start_token_id] + [config.image_token_id] * tokens + \
        [config.vision_end_token_id] + text(18)
    input_ids = torch.tensor([ids])
    inputs = {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "pixel_values": torch.randn(grid[0] * grid[1] * grid[2], patch_dim, generator=gen),
        "image_grid_thw": torch.tensor([grid]),
    }
    save_file(inputs, os.path.join(work, "inputs.safetensors"))
    return inputs


def hf_logits(model_dir, inputs, dtype):
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=dtype, device_map="cuda").eval()
    mm = (inputs["input_ids"] == model.config.image_token_id).int()
    with torch.no_grad():
        out = model(input_ids=inputs["input_ids"].cuda(), attention_mask=inputs["attention_mask"].cuda(),
                    pixel_values=inputs["pixel_values"].cuda().to(dtype), image_grid_thw=inputs["image_grid_thw"].cuda(),
                    mm_token_type_ids=mm.cuda()).logits.float().cpu()
    name = type(model).__name__
    del model
    torch.cuda.empty_cache()
    return out, name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--grid", default="1x52x94", help="the image's patch grid TxHxW")
    ap.add_argument("--compare", action="store_true")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if not args.compare:
        config = AutoConfig.from_pretrained(args.model)
        inputs = make_inputs(config, [int(x) for x in args.grid.split("x")], args.work)
        bf16, name = hf_logits(args.model, inputs, torch.bfloat16)
        f32, _ = hf_logits(args.model, inputs, torch.float32)
        save_file({"bf16": bf16, "f32": f32}, os.path.join(args.work, "hf_logits.safetensors"))
        print(f"hf: {name} ({config.model_type}), tokens {inputs['input_ids'].shape[1]}, logits written")
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
    model_type = AutoConfig.from_pretrained(args.model).model_type
    print(json.dumps({"model_type": model_type, "grid": args.grid, "tokens": ref.shape[1],
                      "max_abs_hf_f32": scale, "pairs": report}, indent=1))


if __name__ == "__main__":
    main()
