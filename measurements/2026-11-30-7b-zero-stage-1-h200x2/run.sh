#!/usr/bin/env bash
# ZeRO stage 1 (`distributed.zero_stage = 1`) on NPROC GPUs of one host (default 2), in three parts
# (PARTS, default "checkpoints 3b 7b"):
#   1. checkpoints: the `small` preset (bf16, f32 masters), 2 GRPO steps with stage 0 and
#      with stage 1, a checkpoint after each; the weights and optimizer files must be equal byte for
#      byte (the NCCL path of the owners' broadcasts and of the gather to rank 0);
#   2. the 3B shape (configs/3b-1gpu.toml, 8 prompts x 8 samples a GPU) at stage 0 and at stage 1;
#   3. the 7B shape's full fine-tune (model.preset = "7b", vision frozen, 4 prompts x 8 samples a
#      GPU, 64 new tokens, at most 512 image tokens) at stage 1. With f32 masters it needs about
#      93 GiB a GPU at 2 GPUs and 72 GiB at 4 with the kept rollout engine (`groundrl plan`), so at
#      2 GPUs under 120 GiB it runs without them (optim.fp32_master = false, about 75 GiB).
# For each run it prints the step times, the peak memory of each GPU (nvidia-smi, sampled every
# 0.5 s) and the plan's estimate of one GPU. Random weights: every reward is 0, so the updates
# have zero advantages (the same matmuls; nothing is learnt). The time limits add up to 15 minutes;
# on two H100s the whole took about 8 (measurements/2026-11-26-zero-stage-1-and-worker-kill-h100x2/), the 7B part alone
# on four H200s 5.3 (measurements/2026-11-26-7b-zero-stage-1-and-update-mfu-h200x4/). The 3B and 7B runs write their random weights first
# (on the CPU: 7.5 and 16.6 GB), which the step records do not count.
#
# Usage on the GPU machine (binary at .device/groundrl, scripts/gpu/build.sh): bash scripts/gpu/zero.sh;
# the 7B shape alone on 4 GPUs: NPROC=4 PARTS=7b bash scripts/gpu/zero.sh
# On the CPU, to check that every command parses (tiny model, Gloo, a step each):
#   BIN=target/debug/groundrl DEVICE=cpu DTYPE=f32 PRESET_SMALL=tiny PRESET_3B=tiny PRESET_7B=tiny \
#     EXTRA="rollout.max_new_tokens=4 trainer.max_steps=1 model.gradient_checkpointing=false" \
#     bash scripts/gpu/zero.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
source scripts/gpu/env.sh
bin=${BIN:-$root/.device/groundrl}
device=${DEVICE:-cuda}
dtype=${DTYPE:-bf16}
read -r -a extra <<< "${EXTRA:-}"
nproc=${NPROC:-2}
parts=" ${PARTS:-checkpoints 3b 7b} "
work=${WORK:-/tmp/groundrl-zero}
out=${OUT:-$work/out}
rm -rf "$work" && mkdir -p "$work" "$out"
gpu_gib=80
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
  gpu_gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | awk '{printf "%d", $1/1024}')
fi
"$bin" synth --out "$work/data" --n 40 --seed 0 --difficulty medium --prompt instruct > /dev/null || exit 1
common=(data.train="$work/data/samples.jsonl" 'data.val=""' trainer.test_freq=0 model.device="$device"
        model.dtype="$dtype" distributed.checksum_every=1)

# Samples every GPU's used memory until the run `$1` ends; `peak NAME` prints the largest per GPU.
sample() {
  command -v nvidia-smi > /dev/null || return 0
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 500 > "$work/$1.smi" &
  echo $! > "$work/$1.smi.pid"
}
peak() {
  [ -f "$work/$1.smi.pid" ] || { echo "$1: no nvidia-smi"; return 0; }
  kill "$(cat "$work/$1.smi.pid")" 2> /dev/null
  awk -F', ' -v run="$1" '{ if ($2 > m[$1]) m[$1] = $2 } END { for (g in m) printf "%s: GPU %s peak %.2f GiB (nvidia-smi)\n", run, g, m[g] / 1024 }' "$work/$1.smi"
}
# Rank 0's step records of run `$1`: time/step, time/rollout, time/update, peak_memory_bytes of GPU 0,
# the update's MFU by model FLOPs and by 6ND.
steps() {
python3 - "$work" "$1" <<'EOF'
import json, sys
work = sys.argv[1]
for name in sys.argv[2:]:
    try:
        rows = [json.loads(line) for line in open(f"{work}/{name}/metrics.jsonl")]
    except OSError as e:
        print(f"{name}: no metrics ({e.strerror})")
        continue
    for r in rows:
        t = r["train"]
        line = (f"{name} step {r['step']}: step {t['time/step']:.2f} s, rollout {t['time/rollout']:.2f} s, "
                f"update {t['time/update']:.2f} s")
        if "peak_memory_bytes" in t:
            line += f", GPU 0 in use {t['peak_memory_bytes'] / 2**30:.2f} GiB"
        if "mfu_model_flops" in t:
            line += f", update MFU {t['mfu_model_flops']:.1%} by model FLOPs ({t['mfu']:.1%} by 6ND)"
        print(line)
EOF
}
# Trains run `$1` on `nproc` workers within `$2` seconds with the overrides after them.
train() {
  local name=$1 limit=$2; shift 2
  sample "$name"
  local s; s=$(date +%s)
  timeout "$limit" "$bin" train configs/3b-1gpu.toml "${common[@]}" "$@" "${extra[@]}" trainer.run_dir="$work/$name" \
    --nproc-per-node "$nproc" --gpu-memory "${gpu_gib}GiB" > "$work/$name.log" 2>&1
  echo "$name: exit $? in $(( $(date +%s) - s )) s"
  peak "$name"
  steps "$name"
  grep -E "keeps the optimizer state|error|Error" "$work/$name.log" | head -4
}
# The plan of one GPU of `nproc` for the overrides given.
plan() {
  "$bin" plan configs/3b-1gpu.toml "${common[@]}" "$@" "${extra[@]}" --nproc-per-node "$nproc" --gpu-memory "${gpu_gib}GiB" \
    | grep -E "^configs|^one GPU|^optimizer state|^peak"
}

if [[ $parts == *" checkpoints "* ]]; then
echo "== 1. checkpoints of stage 0 and stage 1 (small preset, 2 steps)"
small=(model.preset="${PRESET_SMALL:-small}" model.max_pixels=200704 rollout.prompts_per_step=4 rollout.n=4
       rollout.max_new_tokens=32 trainer.mini_batch_size=16 trainer.micro_batch_size=8 trainer.max_steps=2
       trainer.save_freq=1 trainer.keep_checkpoints=0)
train small-stage0 120 "${small[@]}" distributed.zero_stage=0
train small-stage1 120 "${small[@]}" distributed.zero_stage=1
for step in $(ls "$work/small-stage0/checkpoints" | grep step-); do
  for file in weights.safetensors optimizer.safetensors; do
    if cmp -s "$work/small-stage0/checkpoints/$step/$file" "$work/small-stage1/checkpoints/$step/$file"; then
      echo "$step/$file: equal"
    else
      echo "$step/$file: DIFFERS"
    fi
  done
done

fi

if [[ $parts == *" 3b "* ]]; then
echo "== 2. 3B shape, 8 prompts x 8 samples a GPU, 4 steps: stage 0 and stage 1"
b3=(model.preset="${PRESET_3B:-3b}" rollout.prompts_per_step=$((8 * nproc)) trainer.mini_batch_size=$((64 * nproc)) trainer.max_steps=4
    trainer.save_freq=0)
plan "${b3[@]}" distributed.zero_stage=0
train 3b-stage0 180 "${b3[@]}" distributed.zero_stage=0
# Stage 1 starts from the random weights stage 0 wrote (its run folder's complete model folder),
# rather than writing the 7.5 GB again.
plan "${b3[@]}" distributed.zero_stage=1
train 3b-stage1 150 "${b3[@]}" distributed.zero_stage=1 model.preset=none model.path="$work/3b-stage0/initial-model"

fi

if [[ $parts == *" 7b "* ]]; then
echo "== 3. 7B shape, full fine-tune, 4 prompts x 8 samples a GPU, 3 steps: stage 1"
masters=true
[ "$gpu_gib" -lt 120 ] && [ "$nproc" -lt 4 ] && masters=false
b7=(model.preset="${PRESET_7B:-7b}" model.max_pixels=401408 rollout.prompts_per_step=$((4 * nproc)) rollout.max_new_tokens=64
    trainer.mini_batch_size=$((32 * nproc)) trainer.max_steps=3 trainer.save_freq=0 optim.fp32_master=$masters distributed.zero_stage=1)
echo "optim.fp32_master=$masters on GPUs of $gpu_gib GiB"
plan "${b7[@]}"
train 7b-stage1 330 "${b7[@]}"
fi

cd "$work" && tar czf "$out/zero.tgz" ./*.log ./*/metrics.jsonl ./*.smi 2> /dev/null
exit 0
