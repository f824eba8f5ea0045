#!/usr/bin/env bash
# One call on 4 GPUs: the 7B shape's full fine-tune at ZeRO stage 1 with f32 masters (scripts/gpu/zero.sh
# part 3, NPROC=4), then the 3B shape's GRPO step on one GPU (scripts/gpu/scaling.sh 1) for the update's
# MFU by model FLOPs.
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
o=$OUT
mkdir -p $o/zero $o/scaling
echo "== 7B, 4 GPUs, stage 1"
NPROC=4 PARTS=7b OUT=$o/zero timeout 390 bash scripts/gpu/zero.sh
echo "== 3B, 1 GPU"
STEPS=5 LIMIT_S=$((570 - SECONDS)) OUT=$o/scaling bash scripts/gpu/scaling.sh 1
echo "call wall $SECONDS s"
