"""End-to-end golden of the built-in `tiny` preset, as transformers 5.17 sees the folder we write.

`groundrl model init --preset tiny --seed 0 --dtype f32 --out DIR` writes config, weights, tokenizer, chat
template and preprocessor config. This script loads that folder with AutoProcessor and
Qwen2_5_VLForConditionalGeneration (so transformers reading our folder is checked), encodes a batch of
two chats (one with a screenshot, one text-only; left padding) and writes
crates/groundrl-tensor/tests/fixtures/tiny_preset/golden.safetensors with input_ids, attention_mask,
image_grid_thw, a pixel_values checksum and the logits of each row's last 16 positions. The Rust test
rebuilds the folder from the same seed and must reproduce all of it.

Usage: "$(scripts/hf-env.sh)" scripts/goldens/tiny_preset.py --model DIR
"""

import argparse
import json
import os

import torch
import transformers
from PIL import Image
from safetensors.torch import save_file
from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "../../crates/groundrl-tensor/tests/fixtures")
IMAGE = os.path.join(FIXTURES, "processor/wide_108x192.png")
LAST = 16

CHATS = [
    [{"role": "user", "content": [{"type": "image"},
                                  {"type": "text", "text": "Click the Save button. Answer as (x, y)."}]}],
    [{"role": "system", "content": "You locate UI elements."},
     {"role": "user", "content": "Where is the search field?"}],
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    processor = AutoProcessor.from_pretrained(args.model)
    processor.tokenizer.padding_side = "left"
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(args.model, dtype=torch.float32).eval()
    texts = [processor.apply_chat_template(c, add_generation_prompt=True) for c in CHATS]
    image = Image.open(IMAGE).convert("RGB")
    enc = processor(text=texts, images=[image], padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits
    out = os.path.join(FIXTURES, "tiny_preset")
    os.makedirs(out, exist_ok=True)
    save_file({
        "input_ids": enc["input_ids"].contiguous(),
        "attention_mask": enc["attention_mask"].contiguous(),
        "image_grid_thw": enc["image_grid_thw"].contiguous(),
        "pixel_values_sum": enc["pixel_values"].double().sum().reshape(1),
        "logits_last": logits[:, -LAST:, :].contiguous(),
    }, os.path.join(out, "golden.safetensors"))
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__, "texts": texts,
                   "chats": CHATS, "image": "processor/wide_108x192.png", "last_positions": LAST}, f, indent=1)
    print(f"tiny preset: ids {tuple(enc['input_ids'].shape)}, grid {enc['image_grid_thw'].tolist()}, "
          f"logits |max| {logits.abs().max().item():.3f}")


if __name__ == "__main__":
    main()
