"""Parity goldens for groundrl's Qwen3-VL (dense): tiny random models, the image processor and the chat
template, made and run by HF transformers 5.17 on the CPU in float32 with TF32 off.

Writes under crates/groundrl-tensor/tests/fixtures/qwen3_vl/:
  tiny_a/, tiny_b/  config.json, model.safetensors  the model as save_pretrained writes it (bf16 weights, run as f32);
                                          also what groundrl's Qwen3Vl::save must write back (names, dtypes, values)
                    inputs.safetensors    input_ids, attention_mask, mm_token_type_ids, pixel_values (bf16-exact,
                                          stored as bf16), image_grid_thw
                    expected.safetensors  position_ids, rope_deltas, vision_out (merged image features),
                                          deepstack_<i> (the i-th DeepStack feature, in the order the decoder adds
                                          them), logits (f32, every position; padded ones are not compared)
  processor/        preprocessor_config.json  Qwen3-VL's image settings as HF saves them
                    <image>.png               deterministic test images (a screenshot, a photo, an icon)
                    expected.json             per case: grids, image tokens, SHA-256 of HF's f32 pixel_values
                    rows.safetensors          a few whole rows of each case's pixel_values, to say where a
                                              mismatch is
  chat/             chat_template.jinja       Qwen3-VL-4B-Instruct's chat template (an input, checked by hash)
                    cases.json                chats, their rendered text and the input_ids of HF's Qwen3VLProcessor
                                              (tiny tokenizer, the processor/ images and settings)

The two model configs exercise: the learned position grid interpolated up and down to grids that are not
square, DeepStack at several vision layers (tiny_b's list out of order), GQA and not, head_dim given
apart from hidden_size / heads, attention biases on and off, tied and untied embeddings, patch 16 and 8,
several images of different sizes in one row, left padding and a text-only row.

Run: "$(scripts/hf-env.sh)" scripts/goldens/qwen3_vl.py
"""

import hashlib
import json
import math
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers
from PIL import Image
from safetensors.torch import save_file
from transformers import (
    AutoTokenizer,
    Qwen2VLImageProcessor,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "crates/groundrl-tensor/tests/fixtures"
OUT = FIXTURES / "qwen3_vl"
TINY_TOKENIZER = FIXTURES / "tiny-tokenizer"

VOCAB = 256
VSTART, VEND, IMAGE, VIDEO = 248, 249, 250, 251
TEXT_IDS = 240

CONFIGS = {
    # Patch 16 and an 8x8 position grid; image grids 4x6 (down), 2x2 and 10x4 (up in h, down in w). GQA 4:2,
    # head_dim 16 though hidden / heads is 8, no attention bias, separate lm_head, DeepStack after blocks 0 and 2.
    "tiny_a": dict(
        text=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, attention_bias=False, rms_norm_eps=1e-6,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2],
                                   "mrope_interleaved": True}),
        vision=dict(depth=4, hidden_size=32, intermediate_size=48, num_heads=2, patch_size=16,
                    num_position_embeddings=64, deepstack_visual_indexes=[0, 2], out_hidden_size=32),
        tie=False,
        grids=[[1, 4, 6], [1, 2, 2], [1, 10, 4]],
    ),
    # Patch 8 and a 6x6 position grid; grids 6x4, 4x2 and 8x8 (up). No GQA, head_dim 24, attention biases,
    # tied embeddings, DeepStack listed out of order: block 2's merger is the first, block 0's the second.
    "tiny_b": dict(
        text=dict(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=2, head_dim=24, attention_bias=True, rms_norm_eps=1e-5,
                  rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [4, 4, 4],
                                   "mrope_interleaved": True}),
        vision=dict(depth=3, hidden_size=24, intermediate_size=40, num_heads=2, patch_size=8,
                    num_position_embeddings=36, deepstack_visual_indexes=[2, 0], out_hidden_size=48),
        tie=True,
        grids=[[1, 6, 4], [1, 4, 2], [1, 8, 8]],
    ),
}

# Qwen3-VL's released preprocessor_config.json values (Qwen/Qwen3-VL-*-Instruct).
PROCESSOR = dict(size={"shortest_edge": 65536, "longest_edge": 16777216}, patch_size=16, temporal_patch_size=2,
                 merge_size=2, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
# The released Qwen3-VL-4B-Instruct chat template's SHA-256.
TEMPLATE_SHA256 = "3636d0f0bd6bef02654cdffdc447b79cb2cef8ab02cc75267345946291a489e4"


def make_config(spec):
    text = dict(vocab_size=VOCAB, max_position_embeddings=4096, hidden_act="silu", pad_token_id=None, **spec["text"])
    vision = dict(temporal_patch_size=2, spatial_merge_size=2, in_channels=3, hidden_act="gelu_pytorch_tanh",
                  **spec["vision"])
    return Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=IMAGE, video_token_id=VIDEO,
                         vision_start_token_id=VSTART, vision_end_token_id=VEND, tie_word_embeddings=spec["tie"])


def randomize(model, gen):
    """Weights of unit-scale activations (HF's 0.02 init makes near-uniform logits, a weak test)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))


def text(gen, n):
    return torch.randint(0, TEXT_IDS, (n,), generator=gen).tolist()


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


def write_model(name, spec):
    out = OUT / name
    out.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(1234)
    model = Qwen3VLForConditionalGeneration(make_config(spec))
    randomize(model, gen)
    # Stored in bf16 to keep fixtures small; both sides load it as f32 (so the bf16 -> f32 path is tested).
    model.to(torch.bfloat16).save_pretrained(out)
    model = Qwen3VLForConditionalGeneration.from_pretrained(out, dtype=torch.float32).eval()
    tied = model.lm_head.weight.data_ptr() == model.model.language_model.embed_tokens.weight.data_ptr()
    assert tied == spec["tie"], name

    grids = torch.tensor(spec["grids"])
    patches = int(grids.prod(-1).sum())
    patch_dim = 3 * 2 * spec["vision"]["patch_size"] ** 2
    # bf16-exact values, stored as bf16 (half the bytes) and used as f32.
    pixel_values = torch.randn(patches, patch_dim, generator=gen).to(torch.bfloat16).float()
    ids, mask = left_pad(rows(spec["grids"]))
    mm = (ids == IMAGE).int()
    with torch.no_grad():
        position_ids, deltas = model.model.get_rope_index(ids, mm, image_grid_thw=grids, attention_mask=mask)
        vision = model.model.visual(pixel_values, grid_thw=grids)
        logits = model(input_ids=ids, attention_mask=mask, pixel_values=pixel_values, image_grid_thw=grids,
                       mm_token_type_ids=mm).logits
    deepstack = {f"deepstack_{i}": f.contiguous() for i, f in enumerate(vision.deepstack_features)}
    assert len(deepstack) == len(spec["vision"]["deepstack_visual_indexes"])
    save_file({"input_ids": ids, "attention_mask": mask, "mm_token_type_ids": mm.long(),
               "pixel_values": pixel_values.to(torch.bfloat16).contiguous(), "image_grid_thw": grids},
              out / "inputs.safetensors")
    save_file({"position_ids": position_ids.contiguous(), "rope_deltas": deltas.contiguous(),
               "vision_out": vision.pooler_output.contiguous(), **deepstack,
               "logits": logits.float().contiguous()}, out / "expected.safetensors")
    real = mask.bool()
    (out / "golden.json").write_text(json.dumps({
        "transformers": transformers.__version__, "torch": torch.__version__, "device": "cpu", "dtype": "float32",
        "logits_max_abs": logits[real].abs().max().item()}, indent=1) + "\n")
    print(f"{name}: ids {tuple(ids.shape)}, patches {patches}, vision_out {tuple(vision.pooler_output.shape)}, "
          f"deepstack {len(deepstack)}, logits |max| {logits[real].abs().max().item():.3f}")


def screenshot(rng, h, w):
    """A flat-coloured UI: title bar, sidebar, buttons with borders and rows of word-like dashes."""
    a = np.full((h, w, 3), 242, np.uint8)
    a[:48] = (38, 70, 124)
    a[48:, :220] = (226, 230, 236)
    for row in range(80, h - 40, 28):
        x = 250
        while x < w - 80:
            length = int(rng.integers(12, 70))
            a[row : row + 10, x : x + length] = (60, 60, 60)
            x += length + int(rng.integers(6, 14))
    for i, (top, left) in enumerate([(90, 30), (140, 30), (190, 30), (h - 90, w - 260), (h - 90, w - 130)]):
        colour = (52, 120, 246) if i >= 3 else (200, 205, 214)
        a[top : top + 36, left : left + 110] = (90, 90, 90)
        a[top + 2 : top + 34, left + 2 : left + 108] = colour
    return Image.fromarray(a)


def photo(h, w):
    """Smooth colour waves and a soft disc: bicubic resampling sees gradients everywhere."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    disc = np.exp(-(((x - 0.6 * w) / (0.2 * w)) ** 2 + ((y - 0.4 * h) / (0.15 * h)) ** 2))
    r = 128 + 90 * np.sin(x / 23 + y / 41) + 30 * disc
    g = 128 + 90 * np.cos(y / 17 - x / 53) - 40 * disc
    b = 100 + 60 * np.sin((x + y) / 31) + 80 * disc
    return Image.fromarray(np.clip(np.stack([r, g, b], -1), 0, 255).astype(np.uint8))


def icon(h, w):
    """A small RGBA icon, far below the pixel floor: upscaled, and its alpha dropped by convert('RGB')."""
    y, x = np.mgrid[0:h, 0:w]
    inside = ((x - w / 2) ** 2 / (0.4 * w) ** 2 + (y - h / 2) ** 2 / (0.4 * h) ** 2) < 1
    a = np.zeros((h, w, 4), np.uint8)
    a[..., 0] = np.where(inside, 230, 20)
    a[..., 1] = (x * 255 // max(w - 1, 1)).astype(np.uint8)
    a[..., 2] = (y * 255 // max(h - 1, 1)).astype(np.uint8)
    a[..., 3] = np.where(inside, 255, 90)
    return Image.fromarray(a, "RGBA")


PROCESSOR_CASES = {
    "screen_720x1280": ["screen_720x1280"],
    "photo_500x333": ["photo_500x333"],
    "icon_60x90": ["icon_60x90"],
    "batch": ["photo_500x333", "icon_60x90"],
}


def write_processor():
    out = OUT / "processor"
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20251128)
    images = {"screen_720x1280": screenshot(rng, 720, 1280), "photo_500x333": photo(500, 333),
              "icon_60x90": icon(60, 90)}
    for name, image in images.items():
        image.save(out / f"{name}.png", optimize=True)
    processor = Qwen2VLImageProcessor(**PROCESSOR)
    (out / "preprocessor_config.json").write_text(processor.to_json_string())
    expected, rows = {}, {}
    for case, names in PROCESSOR_CASES.items():
        loaded = [Image.open(out / f"{n}.png") for n in names]
        result = processor(loaded, return_tensors="pt")
        pixels = result["pixel_values"].contiguous()
        assert pixels.dtype == torch.float32
        grids = result["image_grid_thw"].tolist()
        picked = sorted({round(i * (pixels.shape[0] - 1) / 3) for i in range(4)})
        rows[f"{case}.index"] = torch.tensor(picked)
        rows[f"{case}.rows"] = pixels[picked].contiguous()
        expected[case] = {
            "images": names,
            "image_grid_thw": grids,
            "image_tokens": [int(np.prod(g)) // 4 for g in grids],
            "pixel_values_shape": list(pixels.shape),
            "pixel_values_sha256": hashlib.sha256(pixels.numpy().astype("<f4").tobytes()).hexdigest(),
        }
        print(f"processor {case}: grids {grids}, pixel_values {tuple(pixels.shape)}")
    save_file(rows, out / "rows.safetensors")
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    return {name: Image.open(out / f"{name}.png") for name in images}


CLICK = {
    "type": "function",
    "function": {
        "name": "click",
        "description": "Click a point on the screen.",
        "parameters": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                       "required": ["x", "y"]},
    },
}

IMG = {"type": "image"}


def say(value):
    return {"type": "text", "text": value}


CHAT_CASES = [
    {"name": "text_only", "messages": [{"role": "user", "content": "Click the Save button."}], "images": [],
     "add_generation_prompt": True},
    {"name": "one_screenshot", "images": ["screen_720x1280"], "add_generation_prompt": True,
     "messages": [{"role": "user", "content": [IMG, say("Where is the Save button?")]}]},
    {"name": "system_and_two_images_with_vision_ids", "images": ["photo_500x333", "icon_60x90"],
     "add_generation_prompt": True, "kwargs": {"add_vision_id": True},
     "messages": [{"role": "system", "content": "You are a GUI agent."},
                  {"role": "user", "content": [say("Compare "), IMG, say(" and "), IMG, say(".")]}]},
    {"name": "tool_call_and_response", "images": ["icon_60x90"], "add_generation_prompt": True, "tools": [CLICK],
     "messages": [{"role": "user", "content": [IMG, say("Click OK.")]},
                  {"role": "assistant", "content": "",
                   "tool_calls": [{"type": "function", "function": {"name": "click", "arguments": {"x": 12, "y": 34}}}]},
                  {"role": "tool", "content": "clicked"}]},
]


def with_images(messages, images):
    """The messages with each image item carrying its PIL image, in order, as HF's processor takes them."""
    remaining = iter(images)
    out = []
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            content = [dict(item, image=next(remaining)) if item == IMG else item for item in content]
        out.append(dict(message, content=content))
    return out


def write_chat(images):
    out = OUT / "chat"
    template = (out / "chat_template.jinja").read_text()
    assert hashlib.sha256(template.encode()).hexdigest() == TEMPLATE_SHA256
    with tempfile.TemporaryDirectory() as folder:
        # The model folder the Rust side assembles too: tiny tokenizer, Qwen3-VL's template and image settings.
        for name in ["tokenizer.json", "tokenizer_config.json"]:
            shutil.copy(TINY_TOKENIZER / name, folder)
        shutil.copy(out / "chat_template.jinja", folder)
        shutil.copy(OUT / "processor/preprocessor_config.json", folder)
        tok = AutoTokenizer.from_pretrained(folder)
        assert tok.chat_template == template, "chat_template.jinja should win over tokenizer_config.json's"
        processor = Qwen3VLProcessor(image_processor=Qwen2VLImageProcessor.from_pretrained(folder), tokenizer=tok,
                                     video_processor=Qwen3VLVideoProcessor(), chat_template=template)
    cases = []
    for case in CHAT_CASES:
        args = dict(add_generation_prompt=case["add_generation_prompt"], tools=case.get("tools"),
                    **case.get("kwargs", {}))
        rendered = processor.apply_chat_template(case["messages"], tokenize=False, **args)
        messages = with_images(case["messages"], [images[n] for n in case["images"]])
        encoded = processor.apply_chat_template(messages, tokenize=True, return_dict=True, **args)
        grids = encoded["image_grid_thw"].tolist() if "image_grid_thw" in encoded else []
        cases.append({**case, "text": rendered, "image_grid_thw": grids, "input_ids": encoded["input_ids"][0]})
        print(f"chat {case['name']}: {len(encoded['input_ids'][0])} ids, grids {grids}")
    (out / "cases.json").write_text(json.dumps(cases, indent=1, ensure_ascii=False) + "\n")


def main():
    assert transformers.__version__ == "5.17.0", transformers.__version__
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for name, spec in CONFIGS.items():
        write_model(name, spec)
    images = write_processor()
    write_chat(images)
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"transformers {transformers.__version__}, torch {torch.__version__}: {OUT} holds {total / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
