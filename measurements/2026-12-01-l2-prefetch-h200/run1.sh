#!/usr/bin/env bash
# L2 prefetch of the next products' weights in the decoding step's memory-idle stretch, one build
# with the prefetch chosen by environment (GROUNDRL_PF_O: o_proj's weight; GROUNDRL_PF_GU_COLS: the
# first columns of every gate|up row, both after q|k|v's product, before the attention;
# GROUNDRL_PF_QKV: the next layer's q|k|v weight after a layer's last norm): `bench rollout` 8 x 8
# of the 3B shape, medians of 5, each setting in turn, two rounds; then one profiled generation of
# the plain setting and of one prefetching. .device/bins.tar.xz holds the build. $OUT gets
# rollout.txt and kernels-*.txt.
set -uo pipefail
source scripts/gpu/env.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-l2-prefetch
rm -rf "$work"
mkdir -p "$out" "$work/new"
tar xJf .device/bins.tar.xz -C "$work/new" || exit 1
bin=$work/new/groundrl
"$bin" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model" > /dev/null || exit 1
settings=("0 0 0" "1 0 0" "1 512 0" "1 1024 0" "0 0 1" "1 512 1" "1 768 1")
for round in 1 2; do
  for s in "${settings[@]}"; do
    read -r o gu qkv <<< "$s"
    echo "== o=$o gu=$gu qkv=$qkv, round $round" >> "$out/rollout.txt"
    GROUNDRL_PF_O=$o GROUNDRL_PF_GU_COLS=$gu GROUNDRL_PF_QKV=$qkv timeout 90 "$bin" bench rollout \
      --model "$work/model" --dtype bf16 --device cuda --prompts 8 --n 8 --bandwidth-gbs 4800 \
      --repeats 5 >> "$out/rollout.txt" 2> /dev/null
  done
done
python3 - "$out/rollout.txt" <<'PY'
import json, sys
label = ""
for line in open(sys.argv[1]):
    if line.startswith("=="):
        label = line.strip("= \n")
    elif line.startswith("{"):
        r = json.loads(line)
        print(f"{label:28} step {r['decode_step_ms']:.3f} ms  {100 * r['roofline_fraction']:.1f}%")
PY
for s in "0 0 0" "${PF_PROFILE:-1 512 1}"; do
  read -r o gu qkv <<< "$s"
  GROUNDRL_PF_O=$o GROUNDRL_PF_GU_COLS=$gu GROUNDRL_PF_QKV=$qkv timeout 90 "$bin" bench rollout \
    --model "$work/model" --dtype bf16 --device cuda --prompts 8 --n 8 --repeats 1 \
    --profile "$work/profile-$o-$gu-$qkv" > /dev/null 2> "$work/profile.log"
  python3 scripts/bench/kernel_table.py "$work/profile-$o-$gu-$qkv/generate.json" --top 16 --per 127 \
    --subtract "$work/profile-$o-$gu-$qkv/prefill.json" > "$out/kernels-$o-$gu-$qkv.txt" 2>&1
  echo "-- o=$o gu=$gu qkv=$qkv"; sed -n '1p;10,24p' "$out/kernels-$o-$gu-$qkv.txt" | cut -c1-110
done
