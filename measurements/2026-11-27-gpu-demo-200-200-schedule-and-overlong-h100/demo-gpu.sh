#!/usr/bin/env bash
# The shipped GPU demo, as a user runs it: `groundrl demo --gpu` (three seeds at once in processes of
# their own on one GPU), its summary, logs and step records kept.
set -u
cd "$(dirname "$0")/.."
source scripts/gpu/env.sh
W=/tmp/demo; rm -rf $W; mkdir -p $W
nvidia-smi --query-gpu=name --format=csv,noheader; nproc; lscpu | grep "Model name"
( while sleep 60; do nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader | tr '\n' ' '; echo; done ) > $W/gpu-usage.txt &
monitor=$!
s=$(date +%s)
timeout 575 $PWD/.device/groundrl demo --gpu --out $W/run ${ARGS:-} > $W/demo.log 2>&1
echo "exit $? wall $(( $(date +%s) - s )) s" | tee $W/wall.txt
kill $monitor
( cd $W && tar czf $OUT/demo.tgz --exclude=data --exclude=checkpoints --exclude=initial-model --exclude=tensorboard . )
ls -la $OUT
grep -E "^seed [0-9]+: held|alarm|mean gain|demo finished|rror" $W/demo.log | head -12
grep -h "alarm" $W/run/seed-*.log | head
