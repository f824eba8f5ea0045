#!/usr/bin/env bash
# One call on one GPU machine: the shipped CPU demo's seed 0 alone on 2 pinned cores (time), the
# curriculum's round 2 with as many steps as continuing (3 seeds, 2 cores each), and the GPU demo's
# third seed of the default config plus a 64-prompt variant on the GPU.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$(python3 -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')
bin=$PWD/.device/groundrl
W=/tmp/r6; rm -rf $W; mkdir -p $W
nvidia-smi --query-gpu=name --format=csv,noheader; nproc; lscpu | grep "Model name"
run() { # name cores threads args...
  local name=$1 cores=$2 threads=$3; shift 3
  ( cd $W && s=$(date +%s) && OMP_NUM_THREADS=$threads timeout 575 taskset -c $cores $bin demo --out $W/$name "$@" \
      > $W/$name.log 2>&1; echo "$name exit $? wall $(( $(date +%s) - s )) s" >> $W/walls.txt ) &
}
run c-ship.s0 0,1 2 --first-seed 0 --seeds 1
for s in 0 1 2; do
  run c-rounds2-eq.s$s $((2 + 2 * s)),$((3 + 2 * s)) 2 --first-seed $s --seeds 1 rounds.count=2 trainer.max_steps=75 trainer.total_epochs=2
done
run g-base.s2 8,9 2 --gpu --first-seed 2 --seeds 1
run g-p64 10,11 2 --gpu --seeds 2 rollout.prompts_per_step=64 trainer.mini_batch_size=512 trainer.micro_batch_size=128
wait
cat $W/walls.txt
cd $W && tar czf $OUT/r6.tgz --exclude='data' --exclude='checkpoints' --exclude='initial-model' --exclude='*.html' --exclude='tensorboard' .
for f in $W/*.log; do echo "== $f"; grep -E "^seed [0-9]+: held|round 1 ended|finished after|alarm|mean gain" $f; done
