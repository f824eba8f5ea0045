#!/usr/bin/env bash
# One call on 2 GPUs: a worker killed during GRPO then a resume (small preset), then ZeRO stage 1.
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
o=$OUT
echo "== kill and resume"
OUT=$o/kill timeout 150 bash scripts/gpu/kill-resume.sh model.preset=small model.max_pixels=200704 rollout.max_new_tokens=32
echo "== zero"
OUT=$o/zero timeout $((590 - SECONDS)) bash scripts/gpu/zero.sh
echo "call wall $SECONDS s"
