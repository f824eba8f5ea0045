#!/usr/bin/env bash
# One call on 2 GPUs: groundrl's GRPO step beside TRL's, the same-rule reward on GPU 0 and the varying
# reward on GPU 1 at the same time (each its own side-by-side run), then `bench rollout` on GPU 0's
# prompts and model (the trainer's rollout phase against the engine alone).
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
o=$OUT
( CUDA_VISIBLE_DEVICES=0 WORK=/tmp/sbs0 OUT=$o/same MODES=same-rule BUDGET_S=480 \
    bash scripts/bench/grpo-side-by-side.sh > $o/same.log 2>&1
  export LD_LIBRARY_PATH=$(python3 -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')
  CUDA_VISIBLE_DEVICES=0 timeout $((575 - SECONDS)) .device/groundrl bench rollout --model /tmp/sbs0/groundrl-same-rule/initial-model \
    --data /tmp/sbs0/data/samples.jsonl --max-pixels 1003520 --prompts 8 --n 8 --new-tokens 128 --dtype bf16 \
    --device cuda --no-cudnn-attention --bandwidth-gbs 3350 > $o/bench-rollout.jsonl 2> $o/bench-rollout.err ) &
( CUDA_VISIBLE_DEVICES=1 WORK=/tmp/sbs1 OUT=$o/varying MODES=varying BUDGET_S=560 \
    bash scripts/bench/grpo-side-by-side.sh > $o/varying.log 2>&1 ) &
wait
cat $o/same.log; echo; cat $o/varying.log; echo; cat $o/bench-rollout.jsonl; tail -3 $o/bench-rollout.err
cd $o && tar czf sbs.tgz same varying same.log varying.log bench-rollout.* && rm -rf same varying
echo "call wall $SECONDS s"
