#!/usr/bin/env bash
# Sweep 11, one call on a 4-GPU host: the GPU demo as shipped (`groundrl demo --gpu`: small preset, 128
# prompts a step, 100 GRPO steps, the click reward alone, three seeds in processes of their own on one
# GPU), four variants side by side, one GPU and 16 cores each: the GRPO learning rate 4e-4 and 8e-4
# (shipped 2e-4), and 4e-4 after a shorter warm-up (300 and 450 steps; shipped 600).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$(python3 -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')
bin=$PWD/.device/groundrl
W=/tmp/s11; rm -rf $W; mkdir -p $W
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
pids=""
run() { # name gpu cores args...
  local name=$1 gpu=$2 cores=$3; shift 3
  ( cd $W && s=$(date +%s) && CUDA_VISIBLE_DEVICES=$gpu timeout 540 taskset -c $cores $bin demo --out $W/$name --gpu "$@" \
      > $W/$name.log 2>&1; echo "$name exit $? wall $(( $(date +%s) - s )) s" >> $W/walls.txt ) &
  pids="$pids $!"
}
run lr4e-4 0 0-15 optim.lr=4e-4
run lr8e-4 1 16-31 optim.lr=8e-4
run lr4e-4-warmup300 2 32-47 optim.lr=4e-4 sft.steps=300
run lr4e-4-warmup450 3 48-63 optim.lr=4e-4 sft.steps=450
( while sleep 60; do nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader | tr '\n' ' '; echo; done ) > $W/gpu-usage.txt &
monitor=$!
wait $pids; kill $monitor
cat $W/walls.txt
cd $W && tar czf $OUT/s11.tgz --exclude='data' --exclude='checkpoints' --exclude='initial-model' --exclude='*.html' --exclude='tensorboard' .
for f in $W/*.log; do echo "== $f"; grep -E "^seed [0-9]+: held|alarm|mean gain|demo finished|rror" $f | head -8; done
grep -h "alarm" $W/*/seed-*.log | head
echo "call wall $SECONDS s"
