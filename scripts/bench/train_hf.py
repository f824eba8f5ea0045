"""HF transformers' training step on the shape of `groundrl bench train`, to set beside it.

The same rows as our benchmark: a random-init folder of either family (`groundrl model init --preset
3b` or `--preset qwen3-4b`), `--rows` rows each of 38 random text tokens, the vision start token, the
image tokens of `--grid` patches, the vision end token and 128 completion tokens, the loss on the
completion tokens only. The model in bf16 with gradient checkpointing on (what a 4B full fine-tuning
on one GPU needs), the vision tower trained, torch's fused AdamW over the bf16 parameters (no f32
master weights, which groundrl keeps: a lighter optimizer than ours). One warm-up step, then the median
of `--iters` steps (forward, backward, optimizer step, zero_grad). Prints one JSON line: step ms,
tokens/s, MFU by 6 x trainable parameters x tokens over 989e12 FLOP/s (H100/H200 dense bf16, as
groundrl prints), peak allocated memory.

Usage (GPU machine): python scripts/bench/train_hf.py --model DIR [--grid 1x46x80] [--rows 8]
"""

import argparse
import json
import statistics
import time

import torch
from transformers import AutoModelForImageTextToText

PROMPT_TEXT = 38
COMPLETION = 128
PEAK_FLOPS = 989e12


def batch(config, grid, rows, gen):
    vision = config.vision_config
    merge = vision.spatial_merge_size
    image_tokens = grid[0] * grid[1] * grid[2] // (merge * merge)
    patch_dim = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
    text = lambda n: torch.randint(0, min(config.vision_start_token_id, config.image_token_id), (n,),
                                   generator=gen).tolist()
    ids = torch.tensor([text(PROMPT_TEXT) + [config.vision_start_token_id] + [config.image_token_id] * image_tokens +
                        [config.vision_end_token_id] + text(COMPLETION) for _ in range(rows)])
    labels = ids.clone()
    labels[:, :-COMPLETION] = -100
    return dict(input_ids=ids.cuda(), attention_mask=torch.ones_like(ids).cuda(), labels=labels.cuda(),
                pixel_values=torch.randn(rows * grid[0] * grid[1] * grid[2], patch_dim, generator=gen)
                .cuda().to(torch.bfloat16),
                image_grid_thw=torch.tensor([grid] * rows).cuda(),
                mm_token_type_ids=(ids == config.image_token_id).int().cuda())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--grid", default="1x52x94")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--iters", type=int, default=3)
    args = ap.parse_args()
    grid = [int(x) for x in args.grid.split("x")]
    model = AutoModelForImageTextToText.from_pretrained(args.model, dtype=torch.bfloat16, device_map="cuda")
    model.config.use_cache = False
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-6, fused=True)
    inputs = batch(model.config, grid, args.rows, torch.Generator().manual_seed(0))

    def step():
        loss = model(**inputs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # warm-up (optimizer states are made here)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.iters):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    tokens = inputs["input_ids"].numel()
    trainable = sum(p.numel() for p in params)
    print(json.dumps({"engine": "hf_train_step", "model_type": model.config.model_type, "grid": grid,
                      "rows": args.rows, "tokens_per_row": inputs["input_ids"].shape[1],
                      "trainable_parameters": trainable, "ms": seconds * 1e3,
                      "tokens_per_s": tokens / seconds, "mfu": 6 * trainable * tokens / seconds / PEAK_FLOPS,
                      "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30}), flush=True)


if __name__ == "__main__":
    main()
