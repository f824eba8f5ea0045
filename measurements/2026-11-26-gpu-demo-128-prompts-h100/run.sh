#!/usr/bin/env bash
# Sweep 10, one call on a 2-GPU host: the GPU demo (`groundrl demo --gpu`, small preset) with 128
# prompts a step and 100 GRPO steps (one optimizer step of 1,024 completions a step), its three seeds in
# processes of their own on one GPU (`--jobs 3`); GPU 0 with the demo's click + Gaussian reward, GPU 1
# with the click reward alone.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$(python3 -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')
bin=$PWD/.device/groundrl
W=/tmp/s10; rm -rf $W; mkdir -p $W
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
pids=""
run() { # name gpu cores args...
  local name=$1 gpu=$2 cores=$3; shift 3
  ( cd $W && s=$(date +%s) && CUDA_VISIBLE_DEVICES=$gpu timeout 545 taskset -c $cores $bin demo --out $W/$name "$@" \
      > $W/$name.log 2>&1; echo "$name exit $? wall $(( $(date +%s) - s )) s" >> $W/walls.txt ) &
  pids="$pids $!"
}
common="--gpu --jobs 3 trainer.micro_batch_size=64 rollout.prompts_per_step=128 trainer.mini_batch_size=1024 trainer.max_steps=100"
run p128 0 0-15 $common
run p128-click 1 16-31 $common reward.spec=$PWD/configs/rewards/synthetic-click-only.toml
( while sleep 60; do nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader | tr '\n' ' '; echo; done ) > $W/gpu-usage.txt &
monitor=$!
wait $pids; kill $monitor
cat $W/walls.txt
cd $W && tar czf $OUT/s10.tgz --exclude='data' --exclude='checkpoints' --exclude='initial-model' --exclude='*.html' --exclude='tensorboard' .
for f in $W/*.log; do echo "== $f"; grep -E "^seed [0-9]+: held|alarm|mean gain|demo finished|rror" $f | head -8; done
grep -h "alarm" $W/*/seed-*.log | head
