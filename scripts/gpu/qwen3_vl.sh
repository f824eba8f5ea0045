#!/usr/bin/env bash
# The GPU machine's measurements of Qwen3-VL, each part within ten minutes:
#   parity  bf16 logits of the 4B and 8B shapes (random init) beside transformers' in bf16 and f32, on one
#           1280x720 screenshot prompt (grid 1x46x80: 920 image tokens, 960 tokens in all);
#   rollout the 4B shape's rollouts, 8 prompts x 1 and x 8 samples of that screenshot, 128 new tokens,
#           beside transformers' `generate` on the same shapes;
#   train   the 4B shape's full fine-tuning step (8 rows, the vision tower trained, and frozen) beside
#           transformers' training step on the same rows;
#   plan    `groundrl plan` against the measured peak of two GRPO steps of configs/3b-1gpu.toml with a
#           random 4B folder (prompts in its 0-1000 frame) on hard screenshots (1280x800 and larger,
#           so every image fills `model.max_pixels`, the image the plan assumes): as it is, with LoRA,
#           with the vision tower trained;
#   demo    `groundrl demo --gpu` with the `qwen3-small` preset and the overrides in $DEMO_OVERRIDES:
#           3 seeds, 1,000 held-out tasks.
# It expects the GPU build at .device/groundrl (scripts/gpu/build.sh). Usage on the GPU machine:
# bash scripts/gpu/qwen3_vl.sh [parity] [rollout] [train] [plan] [demo] (parity, rollout and train when none is
# named). Output: JSON lines under $OUT (default /tmp/groundrl-gpu/out).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
parts=${*:-parity rollout train}
source "$root/scripts/gpu/session.sh"
grid=1x46x80

# A random-init folder of `preset` in bf16 at $work/$preset (made once).
folder() {
  [ -d "$work/$1" ] || "$bin" model init --preset "$1" --out "$work/$1" --dtype bf16 --device cuda >&2 || exit 1
  echo "$work/$1"
}

if want parity; then
echo "== parity: bf16 logits beside transformers, grid $grid"
for preset in qwen3-4b qwen3-8b; do
  dir=$(folder $preset)
  $py "$root/scripts/gpu/bf16_parity.py" --model "$dir" --work "$work" --grid $grid || exit 1
  "$bin" model logits --model "$dir" --inputs "$work/inputs.safetensors" --out "$work/ours_logits.safetensors" \
    --dtype bf16 --device cuda || exit 1
  $py "$root/scripts/gpu/bf16_parity.py" --model "$dir" --work "$work" --grid $grid --compare | tee "$out/parity_$preset.json"
  [ "$preset" = qwen3-4b ] || rm -rf "$dir"
done
fi

if want rollout; then
echo "== rollout: qwen3-4b, 8 prompts of grid $grid, 128 new tokens, beside HF generate"
for n in 1 8; do
  "$bin" bench rollout --preset qwen3-4b --grid $grid --dtype bf16 --device cuda --prompts 8 --n $n \
    --bandwidth-gbs $bw --compare-eager | tee -a "$out/rollout_qwen3-4b.jsonl"
done
$py "$root/scripts/bench/rollout_hf.py" --model "$(folder qwen3-4b)" --grid $grid 2>&1 | grep '^{' |
  tee -a "$out/rollout_qwen3-4b.jsonl"
fi

if want train; then
echo "== train: qwen3-4b full fine-tuning step, 8 rows of grid $grid + 128 completion tokens, beside HF"
"$bin" bench train --preset qwen3-4b --grid $grid --dtype bf16 --device cuda --rows 8 | tee -a "$out/train_qwen3-4b.jsonl"
"$bin" bench train --preset qwen3-4b --grid $grid --dtype bf16 --device cuda --rows 8 --freeze-vision |
  tee -a "$out/train_qwen3-4b.jsonl"
$py "$root/scripts/bench/train_hf.py" --model "$(folder qwen3-4b)" --grid $grid --rows 8 2>&1 | grep '^{' |
  tee -a "$out/train_qwen3-4b.jsonl"
fi

if want plan; then
echo "== plan: memory plan vs measured peak, 4B shape, configs/3b-1gpu.toml (two steps each)"
source "$root/scripts/gpu/plan-check.sh"
plan_on_preset qwen3-4b || exit 1
plan_variant qwen3-4b | tee -a "$out/plan_check_qwen3-4b.jsonl"
plan_variant qwen3-4b-lora16 model.lora_rank=16 model.lora_alpha=32 | tee -a "$out/plan_check_qwen3-4b.jsonl"
plan_variant qwen3-4b-vision model.freeze_vision=false | tee -a "$out/plan_check_qwen3-4b.jsonl"
fi

if want demo; then
echo "== demo: groundrl demo --gpu, preset qwen3-small ${DEMO_OVERRIDES:-}, 3 seeds, 1,000 held-out tasks"
demo=$work/demo-qwen3
rm -rf "$demo"
# shellcheck disable=SC2086 # the overrides are words
(cd "$work" && timeout 570 "$bin" demo --gpu --out "$demo" model.preset=qwen3-small ${DEMO_OVERRIDES:-}) 2>&1 |
  grep -v '^\s*$' | tail -12
cp "$demo/summary.json" "$out/demo_qwen3_summary.json" 2>/dev/null
for f in sft.jsonl metrics.jsonl config.toml; do cp "$demo/seed-0/$f" "$out/demo_qwen3_$f" 2>/dev/null; done
fi
