# Sourced by scripts/gpu/run.sh, scripts/gpu/qwen3_vl.sh and scripts/gpu/qwen3_5.sh (which set $root,
# $bin, $py, $work and $gpu_gib):
# `plan_check CONFIG DIR NAME [OVERRIDES...]` asks `groundrl plan` for CONFIG's peak device memory with
# the overrides, trains two GRPO steps of it on DIR/data/samples.jsonl into DIR/NAME, and prints one
# JSON line: the planned and measured peaks (GiB), the plan's relative error and the steps' times. The
# run decodes nothing but its steps (no validation, no ledger), so the plan counts one kept KV cache,
# and the peak is read from the steps' records.
plan_check() {
  local config=$1 dir=$2 name=$3
  shift 3
  local o=(data.train="$dir/data/samples.jsonl" 'data.val=""' trainer.run_dir="$dir/$name" trainer.max_steps=2
    trainer.save_freq=0 trainer.test_freq=0 rounds.final_ledger=false "$@")
  local planned
  planned=$(cd "$root" && "$bin" plan "$config" "${o[@]}" --gpu-memory "${gpu_gib}GiB" | awk '/^peak/ {print $NF}')
  if ! (cd "$root" && "$bin" train "$config" "${o[@]}" --gpu-memory "${gpu_gib}GiB") > "$dir/$name.log" 2>&1; then
    tail -5 "$dir/$name.log" >&2
    return 1
  fi
  $py - "$dir/$name/metrics.jsonl" "$name" "$planned" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
peak = max(r["train"]["peak_memory_bytes"] for r in rows) / 2**30
planned = float(sys.argv[3])
print(json.dumps({"config": sys.argv[2], "planned_gib": planned, "measured_gib": round(peak, 3),
                  "error": round((planned - peak) / peak, 4),
                  "time_step_s": [round(r["train"]["time/step"], 2) for r in rows]}))
PY
}

# `plan_on_preset PRESET`: for the families that answer in the 0-1000 frame (Qwen3-VL, Qwen3.5), hard
# screenshots at $work/grpo-plan and the folder the trainer's PRESET writes into its run folder (the
# tiny tokenizer beside the weights), drawn once on the GPU rather than in every run on the CPU; then
# `plan_variant NAME [OVERRIDES...]` is `plan_check` of configs/3b-1gpu.toml on that folder.
plan_on_preset() {
  grpo=$work/grpo-plan
  rm -rf "$grpo" && mkdir -p "$grpo"
  "$bin" synth --out "$grpo/data" --n 30 --seed 0 --difficulty hard --prompt instruct --answer-frame qwen1000 > /dev/null
  model=$work/$1-train
  "$bin" model init --preset "$1" --tiny-tokenizer --out "$model" --dtype bf16 --device cuda > /dev/null
}
plan_variant() { plan_check configs/3b-1gpu.toml "$grpo" "$@" model.preset=none model.path="$model"; }
