"""HF transformers' generate on the rollout benchmark's shape, to compare with `groundrl bench rollout`.

The same inputs as our benchmark: a random-init folder of either family (written by `groundrl model
init --preset 3b` or `--preset qwen3-4b`), one screenshot prompt per prompt of `--grid` patches (default
1x52x94: 1,222 image tokens and 40 text tokens, 1,262 in all; 1x46x80 is a 1280x720 screenshot for
Qwen3-VL's 16-pixel patches: 920 image tokens),
sampling at temperature 1.0, exactly 128 new tokens (min = max), batch 8 (8 prompts x 1 sample) and
64 (8 prompts x 8 samples via num_return_sequences). Prints one JSON line per batch size: generated
tokens/s, wall time, peak allocated memory.

Usage (GPU machine): python scripts/bench/rollout_hf.py --model DIR [--grid 1x52x94]
"""

import argparse
import json
import time

import torch
from transformers import AutoModelForImageTextToText

NEW_TOKENS = 128


def prompts(config, grid, count, gen):
    merge = config.vision_config.spatial_merge_size
    tokens = grid[0] * grid[1] * grid[2] // (merge * merge)
    rows = []
    for _ in range(count):
        text = lambda n: torch.randint(0, 151000, (n,), generator=gen).tolist()
        rows.append(text(20) + [config.vision_start_token_id] + [config.image_token_id] * tokens +
                    [config.vision_end_token_id] + text(18))
    return torch.tensor(rows)


def run(model, grid, prompts_count, samples, gen):
    ids = prompts(model.config, grid, prompts_count, gen).cuda()
    vision = model.config.vision_config
    patch_dim = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
    pixels = torch.randn(prompts_count * grid[0] * grid[1] * grid[2], patch_dim, generator=gen)
    inputs = dict(input_ids=ids, attention_mask=torch.ones_like(ids),
                  pixel_values=pixels.cuda().to(torch.bfloat16),
                  image_grid_thw=torch.tensor([grid] * prompts_count).cuda(),
                  mm_token_type_ids=(ids == model.config.image_token_id).int())
    kwargs = dict(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=NEW_TOKENS,
                  min_new_tokens=NEW_TOKENS, num_return_sequences=samples)
    model.generate(**inputs, **{**kwargs, "max_new_tokens": 4, "min_new_tokens": 4})  # warm-up
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    out = model.generate(**inputs, **kwargs)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    generated = (out.shape[1] - ids.shape[1]) * out.shape[0]
    return {"engine": "hf_generate", "model_type": model.config.model_type, "grid": grid,
            "prompt_tokens": ids.shape[1], "batch": prompts_count * samples, "prompts": prompts_count,
            "samples": samples, "new_tokens": out.shape[1] - ids.shape[1], "seconds": seconds,
            "generated_tokens_per_s": generated / seconds,
            "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--grid", default="1x52x94", help="each prompt's image patch grid TxHxW")
    args = ap.parse_args()
    grid = [int(x) for x in args.grid.split("x")]
    model = AutoModelForImageTextToText.from_pretrained(args.model, dtype=torch.bfloat16, device_map="cuda").eval()
    gen = torch.Generator().manual_seed(0)
    for prompts_count, samples in [(8, 1), (8, 8)]:
        print(json.dumps(run(model, grid, prompts_count, samples, gen)), flush=True)


if __name__ == "__main__":
    main()
