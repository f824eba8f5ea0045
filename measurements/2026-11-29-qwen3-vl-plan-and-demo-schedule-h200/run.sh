#!/usr/bin/env bash
# The commands that ran on one H200, 2026-11-29, in this order, with the GPU build of commit f6a15ac
# at .device/groundrl and the scripts of commit 1d4afd5 ($OUT: the call's output folder).

# plan_check_qwen3-4b.jsonl: `groundrl plan` against two GRPO steps of configs/3b-1gpu.toml on a random
# Qwen3-VL-4B folder, hard screenshots (every image at model.max_pixels), three configs.
bash scripts/gpu/qwen3_vl.sh plan

# demo-sft50/: the GPU demo on qwen3-small with a 50-step warm-up (GRPO at the shipped lr 2e-4).
DEMO_OVERRIDES="sft.steps=50" OUT=$OUT/a bash scripts/gpu/qwen3_vl.sh demo

# demo-sft50-lr5e-5/: the same with GRPO at lr 5e-5, seeds 0-2.
DEMO_OVERRIDES="sft.steps=50 optim.lr=5e-5" OUT=$OUT/b bash scripts/gpu/qwen3_vl.sh demo

# demo-sft50-lr5e-5-seeds-3-5/: the same settings, seeds 3-5.
source scripts/gpu/env.sh
(cd /tmp/groundrl-gpu && timeout 570 "$PWD/.device/groundrl" demo --gpu --first-seed 3 --seeds 3 \
  --out /tmp/groundrl-gpu/demo-qwen3-345 model.preset=qwen3-small sft.steps=50 optim.lr=5e-5)

# demo-small-sft50-lr5e-5/: the same schedule on the Qwen2.5-VL `small` preset (the demo's default model).
(cd /tmp && timeout 400 "$PWD/.device/groundrl" demo --gpu --out /tmp/demo-q25 sft.steps=50 optim.lr=5e-5)
