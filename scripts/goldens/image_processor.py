"""Goldens for the Rust Qwen2.5-VL image processor (crates/groundrl-tensor/src/processor/image.rs).

Makes small deterministic test images, saves them as PNGs, runs transformers' default (torchvision)
Qwen2VLImageProcessor on the PNGs as read back from disk, and writes what it returns. Also runs HF's PIL
backend on the same inputs and prints how far it is from the torchvision backend (for the record only).

Run with the HF reference environment (transformers 5.17, torch 2.11, torchvision 0.26), on CPU:

    "$(scripts/hf-env.sh)" scripts/goldens/image_processor.py

Storage, to keep the fixtures small: every value of `pixel_values` is a per-channel function of one
uint8 pixel of the resized image (normalize is elementwise). So a case stores `codes`, HF's patchified
resized uint8 image (the same processor with rescale and normalize off), and `lut.safetensors` stores
HF's own rescale_and_normalize of the 256 uint8 values per channel. Before writing, this script checks
that `lut[channel, codes]` equals HF's real `pixel_values` bit for bit, so the pair is a lossless,
4x smaller encoding of them.
"""

import json
from pathlib import Path

import numpy as np
import torch
import transformers
from PIL import Image
from safetensors.torch import save_file
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor

OUT = Path(__file__).resolve().parents[2] / "crates/groundrl-tensor/tests/fixtures/processor"
SEED = 20250101
PATCH_DIM = 3 * 2 * 14 * 14
# A checkpoint's budget, for the saved config (Qwen2.5-VL's preprocessor_config.json).
CHECKPOINT_MIN_PIXELS, CHECKPOINT_MAX_PIXELS = 3136, 12845056


def gradient(h, w, rng, noise):
    """Smooth colour ramps plus uniform noise of +-noise levels."""
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([255 * x / max(w - 1, 1), 255 * y / max(h - 1, 1), 127 + 120 * np.sin((x + y) / 5)], -1)
    return np.clip(base + rng.integers(-noise, noise + 1, (h, w, 3)), 0, 255).astype(np.uint8)


def hard_edges(h, w, rng):
    """Black/white stripes and blocks over a ramp: bicubic overshoots there, so clamping is exercised."""
    a = gradient(h, w, rng, noise=4)
    a[:, (np.arange(w) // 3) % 4 == 0] = 0
    a[(np.arange(h) // 5) % 3 == 0, :] = 255
    a[h // 3 : h // 2, w // 4 : w // 2] = rng.integers(0, 256, (h // 2 - h // 3, w // 2 - w // 4, 3))
    return a


def make_images(rng):
    """name -> PIL image. Sizes chosen for what they exercise (see CASES)."""
    rgba = np.concatenate([gradient(33, 47, rng, 30), rng.integers(0, 256, (33, 47, 1), dtype=np.uint8)], -1)
    return {
        "noise_70x98": Image.fromarray(gradient(70, 98, rng, 60)),
        "tiny_20x30": Image.fromarray(gradient(20, 30, rng, 40)),
        "wide_108x192": Image.fromarray(hard_edges(108, 192, rng)),
        "rgba_33x47": Image.fromarray(rgba, "RGBA"),
        "gray_45x61": Image.fromarray(gradient(45, 61, rng, 50)[..., 0], "L"),
        "exact_56x84": Image.fromarray(gradient(56, 84, rng, 80)),
    }


# case -> (images, min_pixels, max_pixels, what it checks)
CASES = {
    "noise_70x98": (["noise_70x98"], 3136, 1003520, "70/28 = 2.5 rounds to 2 (ties to even): 56x112"),
    "tiny_20x30": (["tiny_20x30"], 3136, 1003520, "below min_pixels: upscaled to 56x84"),
    "wide_108x192": (["wide_108x192"], 3136, 6272, "16:9 above a small max_pixels: downscaled, clamped"),
    "rgba_33x47": (["rgba_33x47"], 3136, 1003520, "RGBA: alpha dropped by convert('RGB')"),
    "gray_45x61": (["gray_45x61"], 3136, 1003520, "greyscale L: replicated to RGB"),
    "exact_56x84": (["exact_56x84"], 3136, 1003520, "already 56x84: no resize at all"),
    "batch": (["tiny_20x30", "noise_70x98"], 3136, 1003520, "two images: patches concatenated in order"),
}


def run(cls, images, min_pixels, max_pixels, **kwargs):
    # min/max pixels given every time: HF's __init__ writes them into the class-level `size` dict.
    processor = cls(min_pixels=min_pixels, max_pixels=max_pixels, **kwargs)
    out = processor(images, return_tensors="pt")
    return torch.as_tensor(out["pixel_values"]), torch.as_tensor(out["image_grid_thw"])


def normalize_table():
    """HF's own fused rescale_and_normalize of every uint8 value, per channel: (3, 256) f32."""
    processor = Qwen2VLImageProcessor()
    ramp = torch.arange(256, dtype=torch.uint8).view(1, 1, 1, 256).expand(1, 3, 1, 256).contiguous()
    table = processor.rescale_and_normalize(
        ramp, True, processor.rescale_factor, True, processor.image_mean, processor.image_std
    )
    return table.view(3, 256).contiguous()


def decode(lut, codes):
    """lut[channel of each column, codes]: channels are the outermost part of a patch row."""
    channel = (torch.arange(PATCH_DIM) // (PATCH_DIM // 3)).expand_as(codes)
    return lut[channel, codes.long()]


def write_case(name, files, min_pixels, max_pixels, lut):
    images = [Image.open(OUT / f"{f}.png") for f in files]
    pixel_values, grid = run(Qwen2VLImageProcessor, images, min_pixels, max_pixels)
    codes, code_grid = run(
        Qwen2VLImageProcessor, images, min_pixels, max_pixels, do_rescale=False, do_normalize=False
    )
    assert codes.dtype == torch.uint8 and torch.equal(grid, code_grid)
    assert pixel_values.dtype == torch.float32 and torch.equal(decode(lut, codes), pixel_values), name
    pil_values, pil_grid = run(Qwen2VLImageProcessorPil, images, min_pixels, max_pixels)
    assert torch.equal(pil_grid, grid)
    pil_diff = (torch.as_tensor(pil_values, dtype=torch.float32) - pixel_values).abs().max().item()
    save_file({"codes": codes.contiguous(), "image_grid_thw": grid}, OUT / f"{name}.safetensors")
    print(f"{name}: grid {grid.tolist()} pixel_values {tuple(pixel_values.shape)} PIL vs torchvision {pil_diff:.6g}")
    return pil_diff


def main():
    assert transformers.__version__ == "5.17.0", transformers.__version__
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    for name, image in make_images(rng).items():
        image.save(OUT / f"{name}.png", optimize=True)
        print(f"wrote {name}.png ({image.mode} {image.width}x{image.height})")
    lut = normalize_table()
    save_file({"lut": lut}, OUT / "lut.safetensors")
    manifest = {}
    for name, (files, min_pixels, max_pixels, why) in CASES.items():
        pil_diff = write_case(name, files, min_pixels, max_pixels, lut)
        manifest[name] = {"images": files, "min_pixels": min_pixels, "max_pixels": max_pixels, "checks": why,
                          "pil_backend_max_abs_diff": pil_diff}
    (OUT / "cases.json").write_text(json.dumps(manifest, indent=2) + "\n")
    saved = Qwen2VLImageProcessor(min_pixels=CHECKPOINT_MIN_PIXELS, max_pixels=CHECKPOINT_MAX_PIXELS)
    (OUT / "preprocessor_config.json").write_text(saved.to_json_string())
    print(f"max PIL vs torchvision over all cases: {max(c['pil_backend_max_abs_diff'] for c in manifest.values()):.6g}")
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"wrote {len(list(OUT.iterdir()))} files to {OUT}, {total / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
