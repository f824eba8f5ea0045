#!/usr/bin/env bash
# The L2 prefetch of a decoding layer's weights (csrc/prefetch.cu) in one build
# (.device/bins.tar.xz, .device/tests.tar.xz: scripts/gpu/build.sh's binaries), its placement and
# size set by GROUNDRL_L2_PREFETCH="before|after (the q|k|v product),O_PROJ (0|1),GATE_UP_BYTES (of
# each 4,096-byte row)[,QKV (0|1: the q|k|v weight itself, for "before")]" and GROUNDRL_L2_EVICT_LAST (set: the prefetched lines marked to stay): the GPU's L2 size; the tensor crate's CUDA tests with the prefetch on;
# `bench rollout` 8 x 8 of the 3B shape for each setting, two rounds in turn; two profiled
# generations (off, the 1 KiB setting) with the period of a layer and of a step
# (../2026-12-01-dependent-launch-h200/layer_period.py) and their kernel tables. $OUT gets l2.txt,
# tensor-tests.txt, rollout-3b.txt, periods.txt, kernels-off.txt, kernels-after-1k.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-l2-prefetch
rm -rf "$work"
mkdir -p "$out" "$work/bin" "$work/tests"
tar xJf .device/bins.tar.xz -C "$work/bin" || exit 1
tar xJf .device/tests.tar.xz -C "$work/tests" || exit 1
python3 -c 'import torch; p = torch.cuda.get_device_properties(0); print(p.name, "L2", p.L2_cache_size, "bytes")' | tee "$out/l2.txt"
(cd crates/groundrl-tensor && GROUNDRL_L2_PREFETCH=after,1,1024 timeout 200 "$work/tests/groundrl-tensor-tests" --test-threads 4) > "$out/tensor-tests.txt" 2>&1
echo "rc=$?" >> "$out/tensor-tests.txt"
grep -hE "^test result|^rc=|FAILED|panicked" "$out/tensor-tests.txt" | head -10
variant() {  # NAME [VAR=VALUE ...]: a folder NAME whose groundrl runs the build with those variables
  local name=$1
  shift
  mkdir -p "$work/$name"
  printf '#!/bin/sh\n%s exec %s "$@"\n' "$*" "$work/bin/groundrl" > "$work/$name/groundrl"
  chmod +x "$work/$name/groundrl"
  echo "$work/$name/groundrl"
}
p=GROUNDRL_L2_PREFETCH
bins=($(variant off) $(variant o-only $p=after,1,0) $(variant after-1k $p=after,1,1024) \
  $(variant after-1.5k $p=after,1,1536) $(variant before-1k $p=before,1,1024) \
  $(variant gu-only-1k $p=after,0,1024) $(variant after-2k $p=after,1,2048) \
  $(variant last-1k $p=after,1,1024 GROUNDRL_L2_EVICT_LAST=1) $(variant qkv-before $p=before,0,0,1) \
  $(variant before-1k-qkv $p=before,1,1024,1))
rollout_rounds "$out/rollout-3b.txt" "$work/model-3b" 2 "" "${bins[@]}"
for v in off after-1k; do
  timeout 90 "$work/$v/groundrl" bench rollout --model "$work/model-3b" --dtype bf16 --device cuda \
    --prompts 8 --n 8 --repeats 1 --profile "$work/profile-$v" > /dev/null 2> "$work/profile.log"
  echo "== $v" >> "$out/periods.txt"
  python3 measurements/2026-12-01-dependent-launch-h200/layer_period.py "$work/profile-$v/generate.json" >> "$out/periods.txt"
  python3 scripts/bench/kernel_table.py "$work/profile-$v/generate.json" --top 30 --per 127 \
    --subtract "$work/profile-$v/prefill.json" > "$out/kernels-$v.txt" 2>&1
done
cat "$out/periods.txt"
head -24 "$out/kernels-after-1k.txt" | cut -c1-120
