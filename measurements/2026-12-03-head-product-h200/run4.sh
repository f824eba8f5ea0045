#!/usr/bin/env bash
# The GPU's clocks and power while `bench rollout` 8 x 8 of the 3B shape runs, for "base"
# (.device/bins-final.tar.xz) and "inputs" (bins-inputs) in turn, two rounds: nvidia-smi sampled every
# 50 ms into smi-NAME-I.csv, and clocks.py's summary of the samples taken while the GPU was busy.
# $OUT gets rollout.txt, smi-*.csv and clocks.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-head4
rm -rf "$work"
mkdir -p "$out"
unpack_builds "$work" base:bins-final inputs:bins-inputs || exit 1
"$work/base/groundrl" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model-3b" > /dev/null || exit 1
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,clocks.max.mem --format=csv | tee "$out/clocks.txt"
# The throttle reasons' field by its newer name, else its older one.
reasons=clocks_event_reasons.active
nvidia-smi --query-gpu=$reasons --format=csv > /dev/null 2>&1 || reasons=clocks_throttle_reasons.active
timeout 90 "$work/base/groundrl" bench rollout --model "$work/model-3b" --dtype bf16 --device cuda --prompts 8 --n 8 > /dev/null 2>&1
for i in 1 2; do
  for name in base inputs; do
    nvidia-smi --query-gpu=timestamp,utilization.gpu,clocks.sm,clocks.mem,power.draw,temperature.gpu,$reasons \
      --format=csv,noheader,nounits -lms 50 > "$out/smi-$name-$i.csv" &
    smi=$!
    echo "== $name, run $i" >> "$out/rollout.txt"
    timeout 90 "$work/$name/groundrl" bench rollout --model "$work/model-3b" --dtype bf16 --device cuda \
      --prompts 8 --n 8 --bandwidth-gbs 4800 --repeats 5 >> "$out/rollout.txt" 2> /dev/null
    kill $smi
    echo "$name, run $i: $(python3 measurements/2026-12-03-head-product-h200/clocks.py "$out/smi-$name-$i.csv")" | tee -a "$out/clocks.txt"
  done
done
grep -o '"decode_step_ms":[0-9.]*' "$out/rollout.txt"
