#!/usr/bin/env bash
# e21b60e's build ("base", .device/bins-base.tar.xz, as in run1.sh) beside three builds, in one run:
# - "norm": base, and add_rms_norm launched to start during the split product whose parts it sums
#   (it waits for that one before reading anything and lets the next kernel start at once:
#   norm_only.py applied to e21b60e; bins-norm);
# - "qkv2": run1's qkv, with norm's change, and the rotation kernel loading every slice of q|k|v at
#   once (their count a template argument; bins-qkv2);
# - "chain": qkv2, and the rotation launched to start during the q|k|v split product, which lets the
#   kernel after it start once it has waited for the kernel before it (chain.patch; bins-chain,
#   tests-chain).
# - "trace": chain with trace.py applied (a diagnostic build: the attention kernels' blocks record
#   where their time goes; bins-trace), run once with GROUNDRL_TRACE=1 after the rest.
# The tensor and training crates' CUDA tests of chain; one profiled generation of each build
# (`bench rollout` 8 x 8 of the 3B shape) with the period of a layer and of a step and each layer's
# kernels; `bench rollout` 8 x 8, two rounds of the four in turn. $OUT gets tests.tgz, periods.txt,
# timeline.txt, rollout.txt and trace.txt.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-qkv2
rm -rf "$work"
mkdir -p "$out"
names=(base norm qkv2 chain)
unpack_builds "$work" base:bins-base norm:bins-norm qkv2:bins-qkv2 chain:bins-chain trace:bins-trace || exit 1
for build in chain; do
  echo "== tests of $build"
  mkdir -p "$work/tests-out/$build"
  rm -rf "$work/tests"
  cuda_tests "$work/tests-out/$build" "$work" "tests-$build"
done
tar czf "$out/tests.tgz" -C "$work" tests-out
grep -q "^rc=0" "$work/tests-out/chain/tensor-tests.txt" || exit 1  # no timing of a build whose tests fail
builds=()
for build in "${names[@]}"; do builds+=("$work/$build/groundrl"); done
"${builds[0]}" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model-3b" > /dev/null || exit 1
rollout_profile "$out/periods.txt" "$work/model-3b" "${builds[@]}"
cat "$out/periods.txt"
for build in "${names[@]}"; do
  echo "== $build" >> "$out/timeline.txt"
  python3 measurements/2026-12-02-split-product-h200/layer_timeline.py "$work/profile-$build/generate.json" >> "$out/timeline.txt"
done
cat "$out/timeline.txt"
rollout_rounds "$out/rollout.txt" "$work/model-3b" 2 "" "${builds[@]}"
GROUNDRL_TRACE=1 timeout 90 "$work/trace/groundrl" bench rollout --model "$work/model-3b" --dtype bf16 --device cuda \
  --prompts 8 --n 8 --bandwidth-gbs 4800 --repeats 5 > "$out/trace.txt" 2>&1
grep -E "^trace|decode_step" "$out/trace.txt" | cut -c1-200
