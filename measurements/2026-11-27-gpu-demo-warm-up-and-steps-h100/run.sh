#!/usr/bin/env bash
# Sweep 12, one call on a 4-GPU host: the GPU demo (`groundrl demo --gpu`: small preset, 128 prompts a
# step, lr 2e-4, the click reward alone, three seeds in processes of their own on one GPU) with a
# shorter warm-up and longer GRPO, four variants side by side, one GPU and 16 cores each.
set -u
cd "$(dirname "$0")/.."
source scripts/gpu/env.sh
bin=$PWD/.device/groundrl
W=/tmp/s12; rm -rf $W; mkdir -p $W
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
pids=""
run() { # name gpu cores args...
  local name=$1 gpu=$2 cores=$3; shift 3
  ( cd $W && s=$(date +%s) && CUDA_VISIBLE_DEVICES=$gpu timeout 565 taskset -c $cores $bin demo --out $W/$name --gpu "$@" \
      > $W/$name.log 2>&1; echo "$name exit $? wall $(( $(date +%s) - s )) s" >> $W/walls.txt ) &
  pids="$pids $!"
}
run w400-s150 0 0-15 sft.steps=400 trainer.max_steps=150
run w300-s150 1 16-31 sft.steps=300 trainer.max_steps=150
run w200-s200 2 32-47 sft.steps=200 trainer.max_steps=200
run w250-s250 3 48-63 sft.steps=250 trainer.max_steps=250
( while sleep 60; do nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader | tr '\n' ' '; echo; done ) > $W/gpu-usage.txt &
monitor=$!
wait $pids; kill $monitor
cat $W/walls.txt
cd $W && tar czf $OUT/s12.tgz --exclude='data' --exclude='checkpoints' --exclude='initial-model' --exclude='*.html' --exclude='tensorboard'.
for f in $W/*.log; do echo "== $f"; grep -E "^seed [0-9]+: held|alarm|mean gain|demo finished|rror" $f | head -8; done
grep -h "alarm" $W/*/seed-*.log | head
echo "call wall $SECONDS s"
