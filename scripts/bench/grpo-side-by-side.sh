#!/usr/bin/env bash
# groundrl's GRPO step against TRL's GRPOTrainer, one device call: the same config
# (configs/3b-1gpu.toml: 8 prompts x 8 completions, 128 new tokens, bf16, gradient checkpointing,
# AdamW, the vision tower frozen), the same random-init 3B-shape folder (the one `groundrl train`
# writes, RUN/initial-model), the same 1280x720 synthetic screenshots (1,196 image tokens a prompt),
# each for STEPS steps in two reward modes: `same-rule` (configs/rewards/synthetic-click.toml, all 0 on
# random weights, so no advantage is non-zero) and `varying` (configs/rewards/words-length.toml, which
# differs within groups). TRL runs its HF-generate path (vLLM is not installed on the GPU machine).
# Prints one table of steps 2..STEPS: step, rollout and update time, device memory, and the ratios.
#
# Needs the GPU build of the CLI at .device/groundrl (scripts/gpu/build.sh) and, in .device/wheels,
# trl, datasets and what they need beyond torch, transformers, accelerate, pyarrow and pandas (dill,
# multiprocess, xxhash; fsspec, pillow and torchvision, installed only where python3 lacks them) and
# the groundrl wheel (maturin build --release --out .device/wheels); docs/performance.md lists them.
# Each part runs under a timeout within BUDGET_S seconds in all, so a slow part still leaves the table.
#
# Usage (GPU machine, repository root): bash scripts/bench/grpo-side-by-side.sh
# Env: PYTHON (python3), STEPS (5), MODES ("same-rule varying": one of them alone fits a call more
# easily), BUDGET_S (560), WORK (/tmp/groundrl-grpo-trl), OUT ($WORK/out), CONFIG (configs/3b-1gpu.toml),
# GROUNDRL (.device/groundrl).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
py=${PYTHON:-python3}
bin=${GROUNDRL:-$root/.device/groundrl}
config=${CONFIG:-configs/3b-1gpu.toml}
steps=${STEPS:-5}
budget=${BUDGET_S:-560}
modes=${MODES:-same-rule varying}
work=${WORK:-/tmp/groundrl-grpo-trl}
out=${OUT:-$work/out}
rm -rf "$work/site" "$work/data" "$work"/groundrl-*
mkdir -p "$work" "$out"
left() { echo $((budget - SECONDS)); }

echo "== wheels into $work/site (PYTHONPATH)"
need=(trl datasets dill multiprocess xxhash groundrl)
for module in fsspec:fsspec PIL:pillow torchvision:torchvision; do
  "$py" -c "import ${module%%:*}" 2>/dev/null || need+=("${module#*:}")
done
"$py" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --target "$work/site" \
  --find-links "$root/.device/wheels" "${need[@]}" || exit 1
export PYTHONPATH=$work/site${PYTHONPATH:+:$PYTHONPATH}
"$py" -c 'import importlib.metadata as m, sys; print({p: m.version(p) for p in sys.argv[1:]})' trl datasets \
  transformers accelerate torch torchvision pyarrow fsspec groundrl || exit 1
PYTHON=$py
source "$root/scripts/gpu/env.sh"
device=cpu memory=()
if command -v nvidia-smi > /dev/null; then
  device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | awk '{printf "%d", $1/1024}')
  memory=(--gpu-memory "${gib}GiB")
fi
echo "device: $device"
"$bin" synth --out "$work/data" --n 20 --seed 0 --difficulty medium --prompt instruct --size 1280x720 || exit 1

# $1 = mode, $2 = timeout in seconds, rest = overrides of the config.
groundrl_run() {
  local mode=$1 limit=$2; shift 2
  echo "== groundrl, $mode ($limit s at most)"
  timeout -k 10 "$limit" "$bin" train "$config" data.train="$work/data/samples.jsonl" 'data.val=""' \
    trainer.run_dir="$work/groundrl-$mode" trainer.max_steps="$steps" trainer.save_freq=0 trainer.test_freq=0 \
    "$@" "${memory[@]}" 2>&1 | tail -3
  cp "$work/groundrl-$mode/metrics.jsonl" "$out/groundrl-$mode.jsonl" 2>/dev/null
}
# The first run writes the preset's folder from the CPU (about two minutes for the 3B shape); later
# runs and TRL start from it.
first=""
for mode in $modes; do
  overrides=()
  [ "$mode" = varying ] && overrides+=(reward.spec=configs/rewards/words-length.toml)
  [ -n "$first" ] && overrides+=(model.preset=none model.path="$work/groundrl-$first/initial-model")
  groundrl_run "$mode" "$([ -z "$first" ] && echo 240 || echo 120)" "${overrides[@]}"
  first=${first:-$mode}
done

limit=$(($(left) - 15))
echo "== TRL GRPOTrainer, $modes ($limit s at most)"
timeout -k 10 "$limit" "$py" scripts/bench/grpo_trl.py --config "$config" --modes $modes \
  --model "$work/groundrl-$first/initial-model" --data "$work/data/samples.jsonl" --steps "$steps" \
  > "$out/trl.log" 2>&1
grep '^{"' "$out/trl.log" | tee "$out/trl.jsonl"
grep -E 'Error|error:' "$out/trl.log" | tail -3

echo "== steps 2-$steps (mean), $device"
table=()
for mode in $modes; do table+=(--groundrl "$mode=$out/groundrl-$mode.jsonl"); done
"$py" scripts/bench/grpo_table.py "${table[@]}" --trl "$out/trl.jsonl" | tee "$out/table.md"
echo "wall time: $SECONDS s"
