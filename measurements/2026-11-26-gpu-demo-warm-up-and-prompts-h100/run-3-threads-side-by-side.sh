#!/usr/bin/env bash
# The shipped GPU demo (`groundrl demo --gpu`: small preset, 64 prompts a step, three seeds side by side).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$(python3 -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')
bin=$PWD/.device/groundrl
W=/tmp/r7; rm -rf $W; mkdir -p $W
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
cd $W && s=$(date +%s) && timeout 440 $bin demo --gpu --out $W/demo-gpu > $W/demo-gpu.log 2>&1; echo "exit $? wall $(( $(date +%s) - s )) s"
nvidia-smi --query-gpu=memory.used --format=csv,noheader
tar czf $OUT/r7.tgz --exclude='data' --exclude='checkpoints' --exclude='initial-model' --exclude='*.html' --exclude='tensorboard' .
grep -E "^seed [0-9]+: held|alarm|mean gain|demo finished" $W/demo-gpu.log
