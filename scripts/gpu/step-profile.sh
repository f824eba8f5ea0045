#!/usr/bin/env bash
# Where the GRPO step of the 3B shape spends its time on one GPU, with the vision tower frozen and
# trained, and how fast rollouts decode at larger batches:
#   1. random 3B weights drawn once on the GPU (`groundrl model init --tiny-tokenizer`), which every
#      run below loads;
#   2. `groundrl train configs/3b-1gpu.toml` (8 prompts x 8 samples, medium synthetic screenshots)
#      for STEPS steps with `trainer.profile_step` = PROFILE_STEP, vision frozen as shipped, then
#      the same with `model.freeze_vision=false` (RUNS: the runs to make, default "frozen trained");
#      each profiled phase's Chrome trace summed by kernel (`scripts/bench/kernel_table.py`), and its
#      idle gaps charged to the host operators that launched the kernels after them
#      (`scripts/bench/gap_table.py`);
#   3. `groundrl bench rollout` at PROMPTS prompts x 8 samples (1,262-token screenshot prompts, 128
#      new tokens): generated tokens/s and the share of the memory-bandwidth roofline.
# It prints each step's record, then a table: time per step, rollouts, update, MFU by model FLOPs and
# device memory of steps 2-STEPS (the profiled step marked: its times include the profiler's), and
# the rollout rows. Random weights: every reward is 0, so the updates have zero advantages (the same
# matmuls; nothing is learnt). The time limits (LIMIT_S, default 170 s a training run, and
# BENCH_LIMIT_S, default 70 s a bench) add up to 9 minutes 10 s, under the GPU machine's 10 a command.
# The memory pre-flight plans for GPU_GIB GiB (default 139, an H200's).
#
# Usage on the GPU machine (binary at .device/groundrl, scripts/gpu/build.sh):
#   bash scripts/gpu/step-profile.sh
# $OUT gets the kernel tables (kernels-RUN-PHASE.txt), the printed summary (step-profile.txt), the
# logs, step records and bench rows (step-profile.tgz) and the gzipped traces of at most TRACE_MB MiB
# (default 3) each (traces.tar; larger ones are left out). On the CPU, to check that the commands
# parse (tiny model; a build without the profiler refuses `trainer.profile_step`, so the runs go on
# without it):
#   BIN=target/release/groundrl DEVICE=cpu DTYPE=f32 PRESET=tiny STEPS=2 PROFILE_STEP=2 \
#     EXTRA="rollout.max_new_tokens=4 model.max_pixels=200704 model.gradient_checkpointing=false" \
#     BENCH_EXTRA="--grid 1x8x8 --new-tokens 4" bash scripts/gpu/step-profile.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
source scripts/gpu/env.sh
bin=${BIN:-$root/.device/groundrl}
py=${PYTHON:-python3}
device=${DEVICE:-cuda}
dtype=${DTYPE:-bf16}
read -r -a extra <<< "${EXTRA:-}"
read -r -a bench_extra <<< "${BENCH_EXTRA:-}"
steps=${STEPS:-4}
profile_step=${PROFILE_STEP:-3}
prompts=${PROMPTS:-8 32 64}
work=${WORK:-/tmp/groundrl-step-profile}
out=${OUT:-$work/out}
rm -rf "$work" && mkdir -p "$work" "$out"
bandwidth=3350
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in *H200*) bandwidth=4800 ;; esac
fi

echo "== 1. random weights, drawn on $device"
s=$(date +%s)
"$bin" model init --preset "${PRESET:-3b}" --tiny-tokenizer --dtype "$dtype" --device "$device" --out "$work/model" || exit 1
echo "model init: $(( $(date +%s) - s )) s"
"$bin" synth --out "$work/data" --n 40 --seed 0 --difficulty medium --prompt instruct > /dev/null || exit 1
common=(data.train="$work/data/samples.jsonl" 'data.val=""' trainer.test_freq=0 trainer.save_freq=0 rounds.final_ledger=false
        trainer.max_steps="$steps" model.preset=none model.path="$work/model" model.device="$device"
        model.dtype="$dtype")
profile=(trainer.profile_step="$profile_step")

# Trains run `$1` with the overrides after it. A build without the profiler refuses
# `trainer.profile_step` at the start: the run is made again without it, and so are the later ones.
train() {
  local name=$1; shift
  local s; s=$(date +%s)
  run_train "$name" "$@"
  local rc=$?
  if [ ${#profile[@]} -gt 0 ] && grep -q 'the profiler needs a build with the `cuda` feature' "$work/$name.log"; then
    grep -m1 'trainer.profile_step' "$work/$name.log"
    echo "$name: this build has no profiler; the runs go on without trainer.profile_step"
    profile=()
    run_train "$name" "$@"
    rc=$?
  fi
  echo "$name: exit $rc in $(( $(date +%s) - s )) s"
  grep -iE "error|failed|panicked" "$work/$name.log" | head -3
  tables "$name"
}
run_train() {
  local name=$1; shift
  rm -rf "${work:?}/$name"
  timeout "${LIMIT_S:-170}" "$bin" train configs/3b-1gpu.toml "${common[@]}" "$@" "${extra[@]}" "${profile[@]}" \
    trainer.run_dir="$work/$name" --gpu-memory "${GPU_GIB:-139}GiB" > "$work/$name.log" 2>&1
}
# The kernel tables of run `$1`'s traces, and the traces gzipped for $OUT when small enough.
tables() {
  for phase in rollout update; do
    local trace=$work/$1/profile/step-$profile_step-$phase.json
    [ -f "$trace" ] || { echo "$1 $phase: no trace"; continue; }
    echo "$1 $phase: trace of $(du -m "$trace" | cut -f1) MB"
    $py scripts/bench/kernel_table.py "$trace" --top 30 > "$out/kernels-$1-$phase.txt"
    head -12 "$out/kernels-$1-$phase.txt"
    # Where the GPU waited, and for which host operator (appended to the kernel table).
    $py scripts/bench/gap_table.py "$trace" >> "$out/kernels-$1-$phase.txt"
    mkdir -p "$work/traces"
    gzip -c "$trace" > "$work/traces/$1-$phase.json.gz"
    if [ "$(stat -c %s "$work/traces/$1-$phase.json.gz")" -gt $(( ${TRACE_MB:-3} * 1048576 )) ]; then
      echo "$1 $phase: gzipped trace over ${TRACE_MB:-3} MiB, left out"
      rm "$work/traces/$1-$phase.json.gz"
    fi
  done
}

echo "== 2. GRPO steps of configs/3b-1gpu.toml, $steps steps, step $profile_step profiled"
runs=" ${RUNS:-frozen trained} "
[[ $runs == *" frozen "* ]] && train frozen
[[ $runs == *" trained "* ]] && train trained model.freeze_vision=false

echo "== 3. rollouts: prompts x 8 samples, roofline at $bandwidth GB/s"
for p in $prompts; do
  timeout "${BENCH_LIMIT_S:-70}" "$bin" bench rollout --model "$work/model" --dtype "$dtype" --device "$device" \
    --prompts "$p" --n 8 --bandwidth-gbs "$bandwidth" "${bench_extra[@]}" >> "$work/rollout-bench.jsonl" 2> "$work/rollout-$p.log" \
    || { echo "bench rollout --prompts $p: exit $?"; tail -3 "$work/rollout-$p.log"; }
done

$py - "$work" "$profile_step" <<'PY' | tee "$out/step-profile.txt"
import json, os, statistics as st, sys
work, profile_step = sys.argv[1], int(sys.argv[2])
print("| run | step | time/step s | rollout s | update s | mfu_model_flops | device memory GiB |")
print("|---|---|---|---|---|---|---|")
medians = []
for name in ["frozen", "trained"]:
    try:
        rows = [json.loads(line) for line in open(f"{work}/{name}/metrics.jsonl")]
    except OSError as e:
        print(f"| {name} | no metrics ({e.strerror}) | | | | | |")
        continue
    # The profiled step, where the run wrote its traces (a build without the profiler wrote none).
    profiled = profile_step if os.path.isdir(f"{work}/{name}/profile") else 0
    for r in rows[1:]:
        t = r["train"]
        mark = " (profiled)" if r["step"] == profiled else ""
        mfu = f"{t['mfu_model_flops']:.1%}" if "mfu_model_flops" in t else "-"
        memory = f"{t['peak_memory_bytes'] / 2**30:.2f}" if "peak_memory_bytes" in t else "-"
        print(f"| {name} | {r['step']}{mark} | {t['time/step']:.2f} | {t['time/rollout']:.2f} | "
              f"{t['time/update']:.2f} | {mfu} | {memory} |")
    plain = [r["train"] for r in rows[1:] if r["step"] != profiled]
    if plain:
        medians.append((name, len(plain), *(st.median(t[k] for t in plain)
                                            for k in ("time/step", "time/rollout", "time/update"))))
for name, n, step, rollout, update in medians:
    print(f"{name}: median of {n} unprofiled steps after the first: step {step:.2f} s, rollout "
          f"{rollout:.2f} s, update {update:.2f} s")
print()
print("| prompts x samples | batch | generated tokens/s | decode step ms | roofline share | prefill s | device memory GiB |")
print("|---|---|---|---|---|---|---|")
try:
    bench = [json.loads(line) for line in open(f"{work}/rollout-bench.jsonl")]
except OSError:
    bench = []
for b in bench:
    memory = f"{b['device_memory_gib']:.2f}" if b.get("device_memory_gib") is not None else "-"
    print(f"| {b['prompts']} x {b['n']} | {b['batch']} | {b['generated_tokens_per_s']:.0f} | "
          f"{b['decode_step_ms']:.2f} | {b['roofline_fraction']:.1%} | {b['prefill_seconds']:.3f} | {memory} |")
PY
cd "$work" && tar czf "$out/step-profile.tgz" ./*.log ./rollout-bench.jsonl ./*/metrics.jsonl ./*/config.toml 2> /dev/null
[ -d "$work/traces" ] && [ -n "$(ls "$work/traces")" ] && tar cf "$out/traces.tar" -C "$work" traces
# Fails when neither run left step records.
ls "$work"/*/metrics.jsonl > /dev/null 2>&1
