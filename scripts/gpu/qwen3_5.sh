#!/usr/bin/env bash
# The GPU machine's measurements of Qwen3.5, each part within ten minutes:
#   parity  bf16 logits of the demo's small preset and of the dense 4B shape (`qwen3.5-small`,
#           `qwen3.5-4b`, random init; $PARITY_PRESETS to choose) beside transformers' in bf16 and f32,
#           on one 1280x720 screenshot prompt (grid 1x46x80: 920 image tokens, 960 tokens in all);
#   rollout that shape's rollouts, 8 prompts x 1 and x 8 samples of that screenshot, 128 new tokens,
#           beside transformers' `generate` on the same shapes (transformers' own torch implementation
#           of the delta rule and the convolution: flash-linear-attention and causal-conv1d are not
#           installed on the machine);
#   train   that shape's full fine-tuning step (8 rows, the vision tower trained, and frozen) beside
#           transformers' training step on the same rows;
#   plan    `groundrl plan` against the measured peak of two GRPO steps of configs/3b-1gpu.toml with the
#           4B shape (and with LoRA), on hard screenshots;
#   demo    `groundrl demo --gpu` with the `qwen3.5-small` preset and the overrides in $DEMO_OVERRIDES
#           (default: the schedule docs/learning.md reports, `sft.steps=50 optim.lr=5e-5 trainer.max_steps=80`):
#           3 seeds, 1,000 held-out tasks.
# It expects the GPU build at .device/groundrl (scripts/gpu/build.sh). Usage on the GPU machine:
# bash scripts/gpu/qwen3_5.sh [parity] [rollout] [train] [plan] [demo] (parity, rollout and train when none is
# named). Output: JSON lines under $OUT (default /tmp/groundrl-gpu/out).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
parts=${*:-parity rollout train}
source "$root/scripts/gpu/session.sh"
grid=1x46x80
preset=qwen3.5-4b

# A random-init folder of `preset` in bf16 at $work/$preset (made once).
folder() {
  [ -d "$work/$1" ] || "$bin" model init --preset "$1" --out "$work/$1" --dtype bf16 --device cuda >&2 || exit 1
  echo "$work/$1"
}

if want parity; then
for shape in ${PARITY_PRESETS:-qwen3.5-small $preset}; do
echo "== parity: bf16 logits beside transformers, $shape, grid $grid"
dir=$(folder $shape)
mkdir -p "$work/parity-$shape"
$py "$root/scripts/gpu/bf16_parity.py" --model "$dir" --work "$work/parity-$shape" --grid $grid || exit 1
"$bin" model logits --model "$dir" --inputs "$work/parity-$shape/inputs.safetensors" \
  --out "$work/parity-$shape/ours_logits.safetensors" --dtype bf16 --device cuda || exit 1
$py "$root/scripts/gpu/bf16_parity.py" --model "$dir" --work "$work/parity-$shape" --grid $grid --compare |
  tee "$out/parity_$shape.json"
done
fi

if want rollout; then
echo "== rollout: $preset, 8 prompts of grid $grid, 128 new tokens, beside HF generate"
for n in 1 8; do
  "$bin" bench rollout --preset $preset --grid $grid --dtype bf16 --device cuda --prompts 8 --n $n \
    --bandwidth-gbs $bw --compare-eager | tee -a "$out/rollout_$preset.jsonl"
done
$py "$root/scripts/bench/rollout_hf.py" --model "$(folder $preset)" --grid $grid 2>&1 | grep '^{' |
  tee -a "$out/rollout_$preset.jsonl"
fi

if want train; then
echo "== train: $preset full fine-tuning step, 8 rows of grid $grid + 128 completion tokens, beside HF"
"$bin" bench train --preset $preset --grid $grid --dtype bf16 --device cuda --rows 8 | tee -a "$out/train_$preset.jsonl"
"$bin" bench train --preset $preset --grid $grid --dtype bf16 --device cuda --rows 8 --freeze-vision |
  tee -a "$out/train_$preset.jsonl"
$py "$root/scripts/bench/train_hf.py" --model "$(folder $preset)" --grid $grid --rows 8 2>&1 | grep '^{' |
  tee -a "$out/train_$preset.jsonl"
fi

if want plan; then
echo "== plan: memory plan vs measured peak, $preset, configs/3b-1gpu.toml (two steps each)"
source "$root/scripts/gpu/plan-check.sh"
plan_on_preset $preset || exit 1
plan_variant $preset | tee -a "$out/plan_check_$preset.jsonl"
plan_variant $preset-lora16 model.lora_rank=16 model.lora_alpha=32 | tee -a "$out/plan_check_$preset.jsonl"
fi

if want demo; then
DEMO_OVERRIDES=${DEMO_OVERRIDES-sft.steps=50 optim.lr=5e-5 trainer.max_steps=80}
echo "== demo: groundrl demo --gpu, preset qwen3.5-small ${DEMO_OVERRIDES:-}, 3 seeds, 1,000 held-out tasks"
demo=$work/demo-qwen3_5
rm -rf "$demo"
# shellcheck disable=SC2086 # the overrides are words
(cd "$work" && timeout 570 "$bin" demo --gpu --out "$demo" model.preset=qwen3.5-small ${DEMO_OVERRIDES:-}) 2>&1 |
  grep -v '^\s*$' | tail -12
cp "$demo/summary.json" "$out/demo_qwen3_5_summary.json" 2>/dev/null
for f in sft.jsonl metrics.jsonl config.toml; do cp "$demo/seed-0/$f" "$out/demo_qwen3_5_$f" 2>/dev/null; done
fi
