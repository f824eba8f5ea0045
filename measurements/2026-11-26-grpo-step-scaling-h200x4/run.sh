#!/usr/bin/env bash
# The call made on a host of 4 NVIDIA H200 GPUs (binary built at 41f2930, scripts/gpu/scaling.sh as committed
# beside this folder): the 3B shape's GRPO step on 1, 2 and 4 GPUs at 8 prompts x 8 samples a GPU.
OUT=$OUT bash scripts/gpu/scaling.sh 1 2 4 2>&1 | tail -60; echo "call wall $SECONDS s"
