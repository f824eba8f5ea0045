# Sourced by the measurement scripts that time `configs/3b-1gpu.toml` runs side by side (under
# measurements/): `train_runs_setup BIN WORK` draws the random 3B weights on the GPU and 600 medium
# synthetic screenshots into WORK; `train_run NAME BIN [OVERRIDES...]` trains 10 steps with them
# into WORK/NAME (emptied first; 90 s at most), appends "NAME: exit CODE" to WORK/raw/exits.txt and
# copies the step records to WORK/raw/NAME.metrics.jsonl, the log to WORK/raw/NAME.log.
# scripts/bench/step_table.py prints the medians of steps 2-10.
train_runs_setup() {
  train_work=$2
  mkdir -p "$train_work/raw"
  "$1" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$train_work/model" > /dev/null &&
    "$1" synth --out "$train_work/data" --n 600 --seed 0 --difficulty medium --prompt instruct > /dev/null
}

train_run() {
  local name=$1 binary=$2
  shift 2
  rm -rf "${train_work:?}/$name" "$train_work/raw/$name.metrics.jsonl"
  timeout 90 "$binary" train configs/3b-1gpu.toml data.train="$train_work/data/samples.jsonl" 'data.val=""' \
    trainer.test_freq=0 trainer.save_freq=0 rounds.final_ledger=false model.device=cuda model.dtype=bf16 \
    model.preset=none model.path="$train_work/model" trainer.max_steps=10 trainer.run_dir="$train_work/$name" "$@" \
    > "$train_work/raw/$name.log" 2>&1
  echo "$name: exit $?" >> "$train_work/raw/exits.txt"
  cp "$train_work/$name/metrics.jsonl" "$train_work/raw/$name.metrics.jsonl" 2> /dev/null
}
