"""TRL's GRPOTrainer on the GRPO step of a groundrl config, to compare with `groundrl train`.

The same work as `groundrl train CONFIG`: the model folder the trainer wrote (RUN/initial-model: the
random-init 3B shape with groundrl's tokenizer and chat template), the same samples (screenshot +
instruction, through the folder's chat template, the image resized under the config's pixel budget),
`rollout.n` completions of `rollout.prompts_per_step` prompts a step, `rollout.max_new_tokens` new
tokens at `rollout.temperature` (no top-p, no top-k), the reward spec scored by groundrl's wheel, the
vision tower frozen as `model.freeze_vision` says, `model.dtype`, gradient checkpointing, AdamW with
groundrl's defaults (lr 1e-6, weight decay 0.01, gradient clip 1.0, constant schedule), micro-batches
of `trainer.micro_batch_size` and one optimizer step a GRPO step, no KL term (groundrl's default
`loss.kl_coef = 0`; TRL's `beta = 0`), token-mean loss (TRL's `dapo`, groundrl's `token_mean`).

TRL generates with HF transformers' `generate` (its `use_vllm = False` path), with the image and
video placeholder ids suppressed (see PLACEHOLDERS). TRL keeps the weights in `model.dtype` (bf16:
bf16 AdamW moments too), where groundrl keeps f32 master weights.

Two reward modes: `same-rule` scores with the config's `reward.spec` (a random-init model earns 0
everywhere, so every advantage is 0); `varying` with configs/rewards/words-length.toml, a length
reward that differs within groups, so the update works on non-zero advantages.

Prints one JSON line per step: `time_step_s` (wall time from the end of the previous step),
`time_data_s` (the Trainer fetching the step's batches: it decodes every image once per micro-batch,
since TRL's sampler repeats the generation batch for each), `time_rollout_s` (TRL's
`_generate_and_score_completions`: prompt processing, generation, rewards, advantages),
`time_update_s` (the rest: forward, backward, optimizer),
`peak_allocated_gib` (torch.cuda.max_memory_allocated over the step), `device_in_use_gib` (total - free
memory at the step's end, the caching allocator's reservation plus the CUDA context: what groundrl's
`peak_memory_bytes` reads), the mean reward and the share of groups whose rewards are all equal.

Usage: python scripts/bench/grpo_trl.py --config configs/3b-1gpu.toml --model RUN/initial-model \
    --data DATA/samples.jsonl --modes same-rule varying --steps 5
"""

import argparse
import functools
import gc
import json
import tempfile
import time
import tomllib
from pathlib import Path

import datasets
import groundrl
import groundrl.trl
import torch
import transformers
import trl
from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration, TrainerCallback

ROOT = Path(__file__).resolve().parents[2]
VARYING_SPEC = ROOT / "configs/rewards/words-length.toml"
# groundrl's defaults (crates/groundrl-train/src/optim/config.rs, model/config.rs).
LR, WEIGHT_DECAY, GRAD_CLIP, MIN_PIXELS, MAX_PIXELS = 1e-6, 0.01, 1.0, 3136, 12845056
DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32}
# Never sampled by TRL's generate: transformers' forward takes these ids anywhere in a row for the
# image's (video's) places and refuses a batch whose completion holds one, and random weights sample
# them (2 ids of 151,936: were sampling uniform, one 8,192-token rollout in ten would hold one).
PLACEHOLDERS = ("<|image_pad|>", "<|video_pad|>")


def reward_spec(config, mode):
    """The spec file a mode scores with: the config's own rule, or the within-group varying one."""
    if mode == "same-rule":
        return ROOT / config["reward"]["spec"]
    return VARYING_SPEC


def target_of(sample, min_pixels, max_pixels):
    """The reward target groundrl's trainer scores a sample against: its boxes, and the resized size
    the model saw (`resized_size`, from the same smart_resize under the config's pixel budget)."""
    image = sample["images"][0]
    boxes = []
    for i, t in enumerate(sample["targets"]):
        if t["shape"]["type"] != "box":
            raise ValueError(f"sample {sample['id']}: targets[{i}].shape.type: only box targets are supported")
        boxes.append({"bbox": t["shape"]["coords"], "label": t.get("label") or ""})
    height, width = groundrl.smart_resize(image["height"], image["width"], min_pixels=min_pixels,
                                          max_pixels=max_pixels)
    return {"boxes": boxes, "frame": sample["frame"], "image_size": [image["width"], image["height"]],
            "resized_size": [width, height], "none": sample["none"]}


def prompt_text(sample):
    """The instruction of a one-turn prompt whose user turn is the screenshot, then the text: TRL puts
    the image placeholder before the text, which renders the same chat template input."""
    prompt = sample.get("prompt") or []
    kinds = [part.get("type") for part in prompt[0]["content"]] if len(prompt) == 1 else []
    if prompt[:1] and prompt[0]["role"] == "user" and kinds == ["image", "text"]:
        return prompt[0]["content"][1]["text"]
    raise ValueError(f"sample {sample['id']}: prompt: expected one user turn of an image then a text "
                     "(groundrl synth --prompt instruct)")


def load_dataset(path, min_pixels, max_pixels):
    folder = Path(path).parent
    rows = []
    for line in open(path):
        sample = json.loads(line)
        rows.append({"prompt": [{"role": "user", "content": prompt_text(sample)}],
                     "image": str(folder / sample["images"][0]["path"]),
                     "target": json.dumps(target_of(sample, min_pixels, max_pixels))})
    return datasets.Dataset.from_list(rows).cast_column("image", datasets.Image())


def load_processor(model_dir, min_pixels, max_pixels, dataset):
    """The folder's processor as GRPOTrainer loads one itself (left padding), under the config's pixel
    budget, checked against groundrl's resize."""
    processor = AutoProcessor.from_pretrained(model_dir, truncation_side="left", padding_side="left")
    image_processor = processor.image_processor
    image_processor.size = {"shortest_edge": min_pixels, "longest_edge": max_pixels}
    image = dataset[0]["image"]
    grid = image_processor(images=[image], return_tensors="pt")["image_grid_thw"][0].tolist()
    height, width = groundrl.smart_resize(image.height, image.width, min_pixels=min_pixels, max_pixels=max_pixels)
    patch = image_processor.patch_size
    if grid[1:] != [height // patch, width // patch]:
        raise RuntimeError(f"the processor resized a {image.width}x{image.height} image to a {grid} grid, "
                           f"groundrl's smart_resize to {width}x{height}")
    return processor


class StepTimes(TrainerCallback):
    """Per optimizer step: wall time, the rollout share (timed around TRL's generation and scoring),
    peak memory, and the rewards the step's completions got."""

    def __init__(self, mode, group_size, cuda):
        self.mode, self.group_size, self.cuda = mode, group_size, cuda
        self.rollout_seconds, self.rewards, self.last, self.data_seconds = 0.0, [], None, 0.0

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def timed(self, function):
        @functools.wraps(function)
        def run(*args, **kwargs):
            self.sync()
            start = time.perf_counter()
            out = function(*args, **kwargs)
            self.sync()
            self.rollout_seconds += time.perf_counter() - start
            return out
        return run

    def recording(self, reward):
        @functools.wraps(reward)
        def run(*args, **kwargs):
            values = reward(*args, **kwargs)
            self.rewards.extend(values)
            return values
        return run

    def on_train_begin(self, args, state, control, **kwargs):
        self.sync()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        self.last = time.perf_counter()

    def on_step_begin(self, args, state, control, **kwargs):
        # The Trainer fetches the step's batches before this call.
        self.data_seconds = time.perf_counter() - self.last

    def on_step_end(self, args, state, control, **kwargs):
        self.sync()
        now = time.perf_counter()
        step = now - self.last
        groups = [self.rewards[i:i + self.group_size] for i in range(0, len(self.rewards), self.group_size)]
        row = {"framework": "trl", "mode": self.mode, "step": state.global_step, "time_step_s": round(step, 3),
               "time_data_s": round(self.data_seconds, 3), "time_rollout_s": round(self.rollout_seconds, 3),
               "time_update_s": round(step - self.data_seconds - self.rollout_seconds, 3),
               "reward_mean": sum(self.rewards) / max(len(self.rewards), 1),
               "zero_variance_group_share": sum(len(set(g)) == 1 for g in groups) / max(len(groups), 1)}
        if self.cuda:
            free, total = torch.cuda.mem_get_info()
            row.update(peak_allocated_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2),
                       device_in_use_gib=round((total - free) / 2**30, 2))
            torch.cuda.reset_peak_memory_stats()
        print(json.dumps(row), flush=True)
        self.rollout_seconds, self.rewards, self.last = 0.0, [], time.perf_counter()


def grpo_args(config, steps, output_dir, suppress):
    rollout, trainer = config["rollout"], config["trainer"]
    completions = rollout["prompts_per_step"] * rollout["n"]
    micro = trainer["micro_batch_size"]
    if trainer["mini_batch_size"] != completions or completions % micro:
        raise ValueError("trainer.mini_batch_size: the comparison needs one optimizer step a GRPO step "
                         "(mini_batch_size = prompts_per_step x n, a multiple of micro_batch_size)")
    return trl.GRPOConfig(
        output_dir=output_dir, max_steps=steps, per_device_train_batch_size=micro,
        gradient_accumulation_steps=completions // micro, num_generations=rollout["n"],
        max_completion_length=rollout["max_new_tokens"], temperature=rollout["temperature"], top_p=1.0,
        top_k=0, beta=0.0, loss_type="dapo", learning_rate=LR, weight_decay=WEIGHT_DECAY,
        max_grad_norm=GRAD_CLIP, lr_scheduler_type="constant", generation_kwargs={"suppress_tokens": suppress},
        bf16=config["model"]["dtype"] == "bf16", gradient_checkpointing=config["model"]["gradient_checkpointing"],
        use_cpu=config["model"]["device"] == "cpu", save_strategy="no", report_to="none",
        disable_tqdm=True, seed=0)


def run_mode(config, args, mode, dataset, processor):
    model_config = config["model"]
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(args.model, dtype=DTYPES[model_config["dtype"]])
    if model_config.get("freeze_vision", False):
        model.model.visual.requires_grad_(False)
    cuda = model_config["device"] == "cuda"
    times = StepTimes(mode, config["rollout"]["n"], cuda)
    reward = times.recording(groundrl.trl.reward_function(str(reward_spec(config, mode))))
    suppress = processor.tokenizer.convert_tokens_to_ids(list(PLACEHOLDERS))
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = trl.GRPOTrainer(model=model, reward_funcs=[reward],
                                  args=grpo_args(config, args.steps, output_dir, suppress), train_dataset=dataset,
                                  processing_class=processor, callbacks=[times])
        trainer._generate_and_score_completions = times.timed(trainer._generate_and_score_completions)
        trainer.train()
    del trainer, model
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="the groundrl training config (TOML)")
    ap.add_argument("--model", required=True, help="the HF folder groundrl trained from (RUN/initial-model)")
    ap.add_argument("--data", required=True, help="groundrl samples (JSONL) with chat prompts")
    ap.add_argument("--modes", nargs="+", choices=["same-rule", "varying"], default=["same-rule", "varying"])
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    with open(args.config, "rb") as f:
        config = tomllib.load(f)
    model_config = config["model"]
    min_pixels = model_config.get("min_pixels", MIN_PIXELS)
    max_pixels = model_config.get("max_pixels", MAX_PIXELS)
    print(json.dumps({"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
                      "generation": "transformers generate (use_vllm=False)"}), flush=True)
    dataset = load_dataset(args.data, min_pixels, max_pixels)
    processor = load_processor(args.model, min_pixels, max_pixels, dataset)
    for mode in args.modes:
        run_mode(config, args, mode, dataset, processor)


if __name__ == "__main__":
    main()
