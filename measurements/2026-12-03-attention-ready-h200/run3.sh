#!/usr/bin/env bash
# "steps" (0a434e0's build, .device/bins-steps.tar.xz) as it is and with TORCH_BLAS_PREFER_CUBLASLT=1
# ("lt": libtorch's matmuls through cuBLASLt; at batch 64 the decoding step's only cuBLAS product is the
# head's). One profiled generation of each (`bench rollout` 8 x 8 of the 3B shape): the periods and the
# step's kernels outside its layers; `bench rollout` 8 x 8, one untimed run, then four rounds of the two
# in turn; 32 x 8 once each; the GRPO step of `configs/3b-1gpu.toml` (10 steps) of each. $OUT gets
# periods.txt, outside.txt, rollout.txt, rollout-32.txt, table.txt and raw.tgz.
set -uo pipefail
source scripts/gpu/env.sh
source scripts/gpu/rollout-ab.sh
source scripts/gpu/train-runs.sh
out=${OUT:-/tmp/out}
work=/tmp/groundrl-lt
here=measurements/2026-12-03-attention-ready-h200
rm -rf "$work"
mkdir -p "$out"
unpack_builds "$work" steps:bins-steps || exit 1
# The same binary under a second name, run through a wrapper that sets the variable.
mkdir -p "$work/lt"
printf '#!/usr/bin/env bash\nTORCH_BLAS_PREFER_CUBLASLT=1 exec %s "$@"\n' "$work/steps/groundrl" > "$work/lt/groundrl"
chmod +x "$work/lt/groundrl"
builds=("$work/steps/groundrl" "$work/lt/groundrl")
"${builds[0]}" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$work/model-3b" > /dev/null || exit 1
rollout_profile "$out/periods.txt" "$work/model-3b" "${builds[@]}"
cat "$out/periods.txt"
for build in steps lt; do
  echo "== $build" >> "$out/outside.txt"
  python3 "$here/step_outside.py" "$work/profile-$build/generate.json" >> "$out/outside.txt" 2>&1
done
cat "$out/outside.txt"
timeout 90 "${builds[0]}" bench rollout --model "$work/model-3b" --dtype bf16 --device cuda --prompts 8 --n 8 > /dev/null 2>&1
rollout_rounds "$out/rollout.txt" "$work/model-3b" 4 "" "${builds[@]}"
rollout_rounds "$out/rollout-32.txt" "$work/model-3b" 1 "--prompts 32 --n 8" "${builds[@]}"
train_runs_setup "${builds[0]}" "$work/train" || exit 1
for build in steps lt; do train_run "grpo-$build" "$work/$build/groundrl"; done
cat "$work/train/raw/exits.txt" > "$out/table.txt"
python3 scripts/bench/step_table.py "$work/train/raw" grpo-steps grpo-lt >> "$out/table.txt"
cat "$out/table.txt"
tar czf "$out/raw.tgz" -C "$work/train" raw
