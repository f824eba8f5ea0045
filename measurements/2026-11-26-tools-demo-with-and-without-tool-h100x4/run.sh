#!/usr/bin/env bash
# Sweep 8, one call on a 4-GPU host: the zoom-tool demo with the tool (seeds 0, 1, 2, one GPU each)
# and without it (the same three seeds, `--without-tool`, in processes of their own on the fourth GPU).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$(python3 -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')
bin=$PWD/.device/groundrl
W=/tmp/s8; rm -rf $W; mkdir -p $W
nvidia-smi --query-gpu=name --format=csv,noheader; nproc; lscpu | grep "Model name"
run() { # name gpu cores args...
  local name=$1 gpu=$2 cores=$3; shift 3
  ( cd $W && s=$(date +%s) && CUDA_VISIBLE_DEVICES=$gpu timeout 560 taskset -c $cores $bin demo --out $W/$name "$@" \
      > $W/$name.log 2>&1; echo "$name exit $? wall $(( $(date +%s) - s )) s" >> $W/walls.txt ) &
  pids="$pids $!"
}
pids=""
common="--tools --gpu --test-tasks 500 sft.steps=400"
for s in 0 1 2; do
  run tool.s$s $s $((16 * s))-$((16 * s + 15)) $common --first-seed $s --seeds 1
done
run notool 3 48-63 $common --without-tool --jobs 3
( while sleep 60; do nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader | tr '\n' ' '; echo; done ) > $W/gpu-usage.txt &
monitor=$!
wait $pids; kill $monitor
cat $W/walls.txt
cd $W && tar czf $OUT/s8.tgz --exclude='data' --exclude='checkpoints' --exclude='initial-model' --exclude='*.html' --exclude='tensorboard' .
for f in $W/*.log $W/notool/seed-*.log; do echo "== $f"; grep -E "^seed [0-9]+: held|alarm|mean gain|small targets|finished|rror" $f | head -8; done
