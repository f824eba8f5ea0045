#!/usr/bin/env bash
# One call: four GPU demo variants (one per GPU, 3 seeds each) and six CPU demo variants
# (3 seeds each, every seed a process pinned to 2 cores), then one tarball of logs and summaries.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$(python3 -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')
bin=$PWD/.device/groundrl
W=/tmp/r5; rm -rf $W; mkdir -p $W
nvidia-smi --query-gpu=name --format=csv,noheader
gpu_variants=(
  "g-base"
  "g-sft300 sft.steps=300"
  "g-sft300-s150 sft.steps=300 trainer.max_steps=150"
  "g-sft150-s150 sft.steps=150 trainer.max_steps=150"
)
cpu_variants=(
  "c-ship"
  "c-sft300 sft.steps=300"
  "c-sft300-s200 sft.steps=300 trainer.max_steps=200"
  "c-lr1e-4 optim.lr=1e-4"
  "c-s200 trainer.max_steps=200"
  "c-sft200 sft.steps=200"
  "c-rounds2 rounds.count=2 trainer.max_steps=75"
)
g=0
for v in "${gpu_variants[@]}"; do
  set -- $v; name=$1; shift
  ( cd $W && CUDA_VISIBLE_DEVICES=$g OMP_NUM_THREADS=4 timeout 570 taskset -c $((42 + 5 * g))-$((46 + 5 * g)) \
      $bin demo --gpu --out $W/$name "$@" > $W/$name.log 2>&1 ) &
  g=$((g + 1))
done
c=0
for v in "${cpu_variants[@]}"; do
  set -- $v; name=$1; shift
  for s in 0 1 2; do
    ( cd $W && OMP_NUM_THREADS=2 timeout 570 taskset -c $c,$((c + 1)) \
        $bin demo --out $W/$name.s$s --first-seed $s --seeds 1 "$@" > $W/$name.s$s.log 2>&1 ) &
    c=$((c + 2))
  done
done
wait
cd $W && tar czf $OUT/r5.tgz --exclude='data' --exclude='checkpoints' --exclude='initial-model' --exclude='*.html' .
ls -la $OUT
for f in $W/g-*.log; do echo "== $f"; grep -E "seed [0-9]+:|mean|demo finished" $f; done
for f in $W/c-*.log; do echo "== $f"; grep -E "^seed [0-9]+: held" $f; done
