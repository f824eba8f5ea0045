#!/usr/bin/env bash
# CPU sweep on the GPU machine's CPUs + a timing proxy of sequential vs parallel seeds on 2 pinned cores.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$(python3 -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')
export GROUNDRL_BIN=$PWD/.device/groundrl-cpu
nproc; lscpu | grep -E "Model name|Thread|Core|Socket"
W=/tmp/sw; mkdir -p $W
proxy="--test-tasks 100 sft.steps=100 trainer.max_steps=20 trainer.eval_samples=0"
( s=$(date +%s); OMP_NUM_THREADS=2 taskset -c 60,61 $GROUNDRL_BIN demo --out $W/seq --seeds 3 $proxy > $W/seq.log 2>&1; e=$(date +%s); echo "PROXY sequential 2 threads, 3 seeds: $((e - s)) s" ) &
( s=$(date +%s); for k in 0 1 2; do OMP_NUM_THREADS=1 taskset -c 62,63 $GROUNDRL_BIN demo --out $W/par$k --first-seed $k --seeds 1 $proxy > $W/par$k.log 2>&1 & done; wait; e=$(date +%s); echo "PROXY parallel 3 procs x 1 thread: $((e - s)) s" ) &
timeout 560 taskset -c 0-47 bash scripts/study/run.sh $W/sweep .device/sweep4.txt 3 12 2 2>&1 | tail -30
wait
mkdir -p $OUT/sweep4
for f in $W/sweep/*.log $W/sweep/*/summary.json; do n=$(echo ${f#$W/sweep/} | tr / _); cp $f $OUT/sweep4/$n; done
for f in $W/sweep/*/seed-*/metrics.jsonl; do n=$(echo ${f#$W/sweep/} | tr / _); cp $f $OUT/sweep4/$n; done
grep -h "demo finished\|seed [0-9]:" $W/seq.log $W/par*.log
python3 scripts/study/table.py $W/sweep
