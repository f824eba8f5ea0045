#!/usr/bin/env bash
# The GRPO step of configs/3b-1gpu.toml on one GPU: how long a run takes to reach its first step, the
# step's time over steps 2-STEPS with the vision tower frozen (as shipped) and trained, and the larger
# batches users run (32 x 8 and 64 x 8 prompts x samples a step), each against `groundrl plan`.
#   start:   random 3B weights written once (`groundrl model init` on the GPU), then
#            a. `train` from that folder (model.path), STEPS steps: the start and the step time;
#            b. `train` with `model.preset = "3b"` (the weights drawn on the GPU and written into the
#               run folder), 2 steps: the start;
#            c. a. with `model.freeze_vision=false`, STEPS steps;
#            d. a. with `model.gradient_checkpointing=true` (recompute in the backward whatever the
#               GPU; the config's "auto" turns it off where the plan leaves room), STEPS steps.
#   micro:   a. and c. in micro-batches of 16, then a. in one micro-batch of 64, STEPS steps each:
#            fewer, larger kernels (the config's "auto" checkpointing decides for each);
#   batches: 32 x 8 with the config's micro-batch (8) and with the one `plan --largest-micro-batch`
#            picks, then 64 x 8 with the config's, BATCH_STEPS steps each.
# Each run's log lines carry the seconds since its command started (the first-step line the trainer
# prints says where its time went). The table: per run the seconds to the first step, the median
# step, rollout and update times of steps 2 on, the update's MFU by model FLOPs, the peak device
# memory of the step records against the plan's peak.
#
# Usage on the GPU machine (binary at .device/groundrl, scripts/gpu/build.sh):
#   bash scripts/gpu/start-and-batches.sh start micro batches
# On the CPU, to check that the commands parse (tiny model):
#   BIN=target/release/groundrl DEVICE=cpu DTYPE=f32 PRESET=tiny STEPS=2 BATCH_STEPS=1 GPU_GIB=24 \
#     EXTRA="rollout.max_new_tokens=4 model.max_pixels=200704 model.gradient_checkpointing=false" \
#     bash scripts/gpu/start-and-batches.sh start micro batches
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
source scripts/gpu/env.sh
bin=${BIN:-$root/.device/groundrl}
py=${PYTHON:-python3}
device=${DEVICE:-cuda}
dtype=${DTYPE:-bf16}
preset=${PRESET:-3b}
steps=${STEPS:-10}
batch_steps=${BATCH_STEPS:-3}
gpu_gib=${GPU_GIB:-139}
read -r -a extra <<< "${EXTRA:-}"
work=${WORK:-/tmp/groundrl-start-and-batches}
out=${OUT:-$work/out}
mkdir -p "$work" "$out"
parts=" $* "
want() { [[ "$parts" == *" $1 "* ]]; }
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

# Prefixes each line of stdin with the seconds since the pipeline started.
stamp() { $py -u -c 'import sys, time
t = time.time()
for line in sys.stdin:
    print(f"{time.time() - t:8.2f} {line}", end="", flush=True)'; }

# The model folder is made once (MODEL: one made already, e.g. by step-profile.sh).
model=${MODEL:-$work/model}
if [ ! -d "$model" ]; then
  s=$(date +%s)
  "$bin" model init --preset "$preset" --tiny-tokenizer --dtype "$dtype" --device "$device" --out "$model" || exit 1
  echo "model init: $(( $(date +%s) - s )) s"
fi
[ -f "$work/data/samples.jsonl" ] ||
  "$bin" synth --out "$work/data" --n 600 --seed 0 --difficulty medium --prompt instruct > /dev/null || exit 1
common=(data.train="$work/data/samples.jsonl" 'data.val=""' trainer.test_freq=0 trainer.save_freq=0
        rounds.final_ledger=false model.device="$device" model.dtype="$dtype")
folder=(model.preset=none model.path="$model")

# Runs `$1` (a name) for `$2` steps with the overrides after them; its log and the plan's peak kept.
train() {
  local name=$1 n=$2; shift 2
  rm -rf "${work:?}/$name"
  local o=("${common[@]}" trainer.max_steps="$n" "$@" "${extra[@]}" trainer.run_dir="$work/$name")
  "$bin" plan configs/3b-1gpu.toml "${o[@]}" --gpu-memory "${gpu_gib}GiB" > "$work/$name.plan" 2>&1
  { timeout "${LIMIT_S:-240}" "$bin" train configs/3b-1gpu.toml "${o[@]}" --gpu-memory "${gpu_gib}GiB" 2>&1
    echo "exit $?"; } | stamp > "$work/$name.log"
  grep -E "first step begins|^ *[0-9.]+ exit|error|panicked" "$work/$name.log" | head -4
}

if want start; then
  echo "== start: $steps steps from the folder, 2 from the preset, $steps with the tower trained, $steps with checkpointing"
  train folder "$steps" "${folder[@]}"
  train preset 2 model.preset="$preset"
  train tower "$steps" "${folder[@]}" model.freeze_vision=false
  train ckpt "$steps" "${folder[@]}" model.gradient_checkpointing=true
fi
if want micro; then
  echo "== micro: $steps steps in micro-batches of 16 (tower frozen, then trained), then in one of 64"
  train m16 "$steps" "${folder[@]}" trainer.micro_batch_size=16
  train tower-m16 "$steps" "${folder[@]}" model.freeze_vision=false trainer.micro_batch_size=16
  train m64 "$steps" "${folder[@]}" trainer.micro_batch_size=64
fi
if want batches; then
  echo "== batches: 32 x 8 and 64 x 8 prompts x samples, $batch_steps steps"
  b32=("${folder[@]}" rollout.prompts_per_step=32 trainer.mini_batch_size=256)
  train b32 "$batch_steps" "${b32[@]}"
  "$bin" plan configs/3b-1gpu.toml "${common[@]}" "${b32[@]}" "${extra[@]}" --gpu-memory "${gpu_gib}GiB" \
    --largest-micro-batch > "$work/b32-largest.plan" 2>&1
  micro=$(sed -n 's/^trainer.micro_batch_size = \([0-9]*\) is the largest.*/\1/p' "$work/b32-largest.plan")
  echo "plan --largest-micro-batch for 32 x 8: ${micro:-none}"
  [ -n "$micro" ] && train b32-largest "$batch_steps" "${b32[@]}" trainer.micro_batch_size="$micro"
  train b64 "$batch_steps" "${folder[@]}" rollout.prompts_per_step=64 trainer.mini_batch_size=512
fi

$py - "$work" <<'PY' | tee "$out/start-and-batches.txt"
import json, os, re, statistics as st, sys
work = sys.argv[1]
print("| run | first step begins, s (trainer's line) | steps | step s (median of 2 on) | rollout s | update s | update MFU, model FLOPs | peak GiB | plan GiB |")
print("|---|---|---|---|---|---|---|---|---|")
for name in ["folder", "preset", "tower", "ckpt", "m16", "tower-m16", "m64", "b32", "b32-largest", "b64"]:
    log = f"{work}/{name}.log"
    if not os.path.exists(log):
        continue
    text = open(log).read()
    m = re.search(r"^\s*([0-9.]+) first step begins ([0-9.]+) s after the start \((.*)\)$", text, re.M)
    start = f"{m.group(1)} ({m.group(2)}: {m.group(3)})" if m else "-"
    planned = re.search(r"^peak\s.*?([0-9.]+)\s*$", open(f"{work}/{name}.plan").read(), re.M)
    try:
        rows = [json.loads(l)["train"] for l in open(f"{work}/{name}/metrics.jsonl")]
    except OSError:
        print(f"| {name} | {start} | no metrics | | | | | | |")
        continue
    later = rows[1:] or rows
    med = lambda k: st.median(r[k] for r in later)
    mfu = f"{med('mfu_model_flops'):.1%}" if all("mfu_model_flops" in r for r in later) else "-"
    peak = max(r.get("peak_memory_bytes", 0) for r in rows) / 2**30
    print(f"| {name} | {start} | {len(rows)} | {med('time/step'):.3f} | {med('time/rollout'):.3f} | "
          f"{med('time/update'):.3f} | {mfu} | {peak:.2f} | {planned.group(1) if planned else '-'} |")
    print(f"{name} steps: " + " ".join(f"{r['time/step']:.2f}" for r in rows), file=sys.stderr)
PY
cd "$work" && tar czf "$out/start-and-batches.tgz" ./*.log ./*.plan ./*/metrics.jsonl ./*/config.toml 2> /dev/null
ls "$work"/*/metrics.jsonl > /dev/null 2>&1
