"""transformers 5.17 loads what `groundrl export` writes, and its logits equal groundrl's.

Trains each family's tiny preset (`tiny`: Qwen2.5-VL, `qwen3-tiny`: Qwen3-VL) for 2 GRPO steps on the
CPU in f32, once with full weights and once with LoRA (rank 4, merged into the weights by the export),
on easy synthetic screenshots; exports each run with `groundrl export`; then, for each exported folder:

- loads it with transformers' AutoProcessor and AutoModelForImageTextToText.from_pretrained (which
  picks Qwen2_5_VLForConditionalGeneration or Qwen3VLForConditionalGeneration by `model_type`)
  (output_loading_info: missing, unexpected and mismatched tensors must all be none, so every tensor
  is read under the name transformers expects);
- encodes a fixed input with transformers' processor: the committed screenshot
  crates/groundrl-tensor/tests/fixtures/processor/wide_108x192.png in a chat and a text-only chat,
  left-padded to one batch (the chats of scripts/goldens/tiny_preset.py);
- runs transformers and `groundrl model logits` (same folder, same input tensors, f32, CPU) and
  prints the largest |difference| of the logits over the real (unpadded) tokens.

Exits 1 when a tensor is missing, unexpected or mismatched, or a difference exceeds --tolerance.

Not run by scripts/test.sh (which runs scripts/parity/*.sh): its environment is about 5 GB
(scripts/hf-env.sh), which CI does not install.

Usage: py=$(scripts/hf-env.sh) && "$py" scripts/parity/export_hf.py [--bin target/release/groundrl]
       [--presets tiny,qwen3-tiny]
"""

import argparse
import os
import platform
import subprocess
import sys
import tempfile

import torch
import transformers
from PIL import Image
from safetensors.torch import load_file, save_file
from transformers import AutoModelForImageTextToText, AutoProcessor

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
IMAGE = os.path.join(ROOT, "crates/groundrl-tensor/tests/fixtures/processor/wide_108x192.png")
SPEC = os.path.join(ROOT, "configs/rewards/length-only.toml")

CHATS = [
    [{"role": "user", "content": [{"type": "image"},
                                  {"type": "text", "text": "Click the Save button. Answer as (x, y)."}]}],
    [{"role": "system", "content": "You locate UI elements."},
     {"role": "user", "content": "Where is the search field?"}],
]

CONFIG = """
[model]
preset = "{preset}"
dtype = "f32"
device = "cpu"
gradient_checkpointing = false
[data]
train = "{data}"
[rollout]
n = 4
prompts_per_step = 4
max_new_tokens = 8
[reward]
spec = "{spec}"
correct_component = "brevity"
correct_threshold = 0.5
[optim]
lr = 1e-2
[trainer]
total_epochs = 10
max_steps = 2
mini_batch_size = 16
micro_batch_size = 8
save_freq = 1
test_freq = 0
"""


def groundrl(binary, *args):
    done = subprocess.run([binary, *args], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"groundrl {' '.join(args)} failed:\n{done.stderr}")
    return done.stderr


def train_and_export(binary, work, name, overrides):
    """A 2-step tiny run with `overrides`, exported; returns the exported folder."""
    config = os.path.join(work, "config.toml")
    run, out = os.path.join(work, name), os.path.join(work, f"{name}-hf")
    groundrl(binary, "train", config, f'trainer.run_dir="{run}"', *overrides)
    print(groundrl(binary, "export", run, "--out", out).strip())
    return out


def compare(binary, folder, work):
    """Max |diff| of transformers' and groundrl's logits on the real tokens, and the loading report."""
    processor = AutoProcessor.from_pretrained(folder)
    processor.tokenizer.padding_side = "left"
    model, info = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32,
                                                              output_loading_info=True)
    model.eval()
    problems = {k: v for k, v in info.items() if v}
    texts = [processor.apply_chat_template(c, add_generation_prompt=True) for c in CHATS]
    enc = processor(text=texts, images=[Image.open(IMAGE).convert("RGB")], padding=True,
                    return_tensors="pt")
    with torch.no_grad():
        hf = model(**enc).logits
    inputs, logits = os.path.join(work, "inputs.safetensors"), os.path.join(work, "logits.safetensors")
    save_file({k: enc[k].contiguous() for k in
               ("input_ids", "attention_mask", "pixel_values", "image_grid_thw")}, inputs)
    groundrl(binary, "model", "logits", "--model", folder, "--inputs", inputs, "--out", logits,
             "--device", "cpu", "--dtype", "f32")
    ours = load_file(logits)["logits"]
    real = enc["attention_mask"].bool()
    diff = (hf - ours).abs()[real].max().item()
    scale = hf[real].abs().max().item()
    return diff, scale, tuple(hf.shape), problems, type(model).__name__


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/groundrl"))
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--presets", default="tiny,qwen3-tiny", help="the presets to train and export")
    args = ap.parse_args()
    commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                            text=True).stdout.strip()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    print(f"groundrl {commit}, transformers {transformers.__version__}, torch {torch.__version__}, "
          f"CPU {cpu}, f32")
    failed = False
    with tempfile.TemporaryDirectory() as work:
        data = os.path.join(work, "data")
        groundrl(args.bin, "synth", "--n", "8", "--difficulty", "easy", "--out", data)
        for preset in args.presets.split(","):
            with open(os.path.join(work, "config.toml"), "w") as f:
                f.write(CONFIG.format(preset=preset, data=os.path.join(data, "samples.jsonl"), spec=SPEC))
            for kind, overrides in [("full", []), ("lora", ["model.lora_rank=4"])]:
                name = f"{preset}-{kind}"
                folder = train_and_export(args.bin, work, name, overrides)
                diff, scale, shape, problems, loaded_as = compare(args.bin, folder, work)
                ok = not problems and diff <= args.tolerance
                failed |= not ok
                report = problems or "no missing, unexpected or mismatched tensors"
                print(f"{name}: {loaded_as}, logits {shape}, max |transformers - groundrl| {diff:.3e} over "
                      f"the real tokens (max |logit| {scale:.3f}); loading report: {report}; "
                      f"{'ok' if ok else 'FAILED'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
