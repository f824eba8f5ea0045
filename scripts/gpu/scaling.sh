#!/usr/bin/env bash
# Data-parallel scaling of the GRPO step: the 3B shape (configs/3b-1gpu.toml, random weights, bf16,
# frozen vision tower, gradient checkpointing, 128 new tokens) on 1, 2, ... GPUs of one host at the
# same batch per GPU, 8 prompts x 8 samples (`rollout.prompts_per_step` = 8 N, `mini_batch_size` =
# 64 N, `--nproc-per-node N` over NCCL). The first run writes the random weights (7.5 GB, on the
# CPU); the others load them from its run folder. Every reward is 0 with random weights, so the
# updates have zero advantages (the same matmuls; nothing is learnt).
#
# Usage on the GPU machine (binary at .device/groundrl, scripts/gpu/build.sh):
#   bash scripts/gpu/scaling.sh [GPU COUNTS, default "1 2 4"]
# It prints each step's record and a table: completions/s (median of steps 2-STEPS) and the scaling
# efficiency against one GPU. EXTRA adds config overrides to every run, e.g. the gradient all-reduce
# during the backward pass instead of after it (a run clears WORK, so give each its own):
#   EXTRA="distributed.overlap_backward=true" WORK=/tmp/groundrl-scaling-overlap bash scripts/gpu/scaling.sh 1 2
# On the CPU, to check that the commands parse (tiny model, Gloo):
#   BIN=target/release/groundrl EXTRA="model.preset=tiny model.device=cpu model.dtype=f32 rollout.max_new_tokens=4" \
#     STEPS=2 bash scripts/gpu/scaling.sh 1 2
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
source scripts/gpu/env.sh
bin=${BIN:-$root/.device/groundrl}
read -r -a extra <<< "${EXTRA:-}"
steps=${STEPS:-6}
counts=${*:-1 2 4}
work=${WORK:-/tmp/groundrl-scaling}
out=${OUT:-$work/out}
rm -rf "$work" && mkdir -p "$work" "$out"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
"$bin" synth --out "$work/data" --n 200 --seed 0 --difficulty medium --prompt instruct > /dev/null || exit 1
common=(data.train="$work/data/samples.jsonl" 'data.val=""' trainer.test_freq=0 trainer.save_freq=0
        trainer.max_steps="$steps" distributed.checksum_every=3)
model=()
for n in $counts; do
  smi=$work/gpus-$n.smi
  command -v nvidia-smi > /dev/null && { nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 500 > "$smi" & }
  s=$(date +%s)
  # The first run also writes the random weights (7.5 GB on the CPU: about two minutes).
  limit=${LIMIT_S:-240}
  [ ${#model[@]} -eq 0 ] && limit=$((limit + 180))
  timeout "$limit" "$bin" train configs/3b-1gpu.toml "${common[@]}" "${extra[@]}" "${model[@]}" \
    rollout.prompts_per_step=$((8 * n)) trainer.mini_batch_size=$((64 * n)) trainer.run_dir="$work/gpus-$n" \
    --nproc-per-node "$n" > "$work/gpus-$n.log" 2>&1
  echo "$n GPU(s): exit $? in $(( $(date +%s) - s )) s"
  command -v nvidia-smi > /dev/null && kill $! 2> /dev/null
  grep -iE "error|failed" "$work/gpus-$n.log" | head -3
  # Later runs load the first run's random weights rather than writing them again.
  [ ${#model[@]} -eq 0 ] && [ -d "$work/gpus-$n/initial-model" ] && model=(model.preset=none model.path="$work/gpus-$n/initial-model")
done
python3 - "$work" $counts <<'PY'
import json, statistics as st, sys
work, counts = sys.argv[1], [int(c) for c in sys.argv[2:]]
rate = {}
for n in counts:
    try:
        rows = [json.loads(line) for line in open(f"{work}/gpus-{n}/metrics.jsonl")]
    except OSError as e:
        print(f"{n} GPU(s): no metrics ({e.strerror})"); continue
    peaks = {}
    try:
        for line in open(f"{work}/gpus-{n}.smi"):
            gpu, used = (int(x) for x in line.split(", "))
            peaks[gpu] = max(peaks.get(gpu, 0), used)
    except (OSError, ValueError):
        pass
    for r in rows:
        t = r["train"]
        print(json.dumps({"gpus": n, "step": r["step"], "completions": r["rollout"]["completions"],
                          **{k: round(v, 4) for k, v in t.items() if k.startswith(("time/", "mfu"))}}))
    later = rows[1:]
    if later:
        rate[n] = st.median(r["rollout"]["completions"] / r["train"]["time/step"] for r in later)
        times = [r["train"]["time/step"] for r in later]
        print(f"{n} GPU(s): step {min(times):.2f}-{max(times):.2f} s (steps 2-{rows[-1]['step']}), "
              f"{rate[n]:.2f} completions/s, nvidia-smi peak "
              + ", ".join(f"GPU {g} {p / 1024:.2f} GiB" for g, p in sorted(peaks.items()) if p > 1024))
print("| GPUs | completions/s (median, steps 2-) | scaling efficiency |")
print("|---|---|---|")
for n in counts:
    if n in rate:
        eff = f"{rate[n] / (n * rate[1]):.1%}" if 1 in rate else "no 1-GPU run"
        print(f"| {n} | {rate[n]:.2f} | {eff} |")
PY
cd "$work" && tar czf "$out/scaling.tgz" ./*.log ./*.smi ./gpus-*/metrics.jsonl ./gpus-*/config.toml 2> /dev/null
# Fails when no run left step records.
ls ./gpus-*/metrics.jsonl > /dev/null 2>&1
