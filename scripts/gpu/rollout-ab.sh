# Sourced by the measurement scripts that time builds' `bench rollout` side by side (under
# measurements/): `rollout_ab OUT MODEL BIN_A BIN_B [ROUNDS [ARGS...]]` runs `bench rollout` 8 x 8
# (medians of 5; ARGS replace `--prompts 8 --n 8`) ROUNDS times (default 3) for each binary,
# alternating A, B, A, B, ..., on the random-weight folder MODEL (made by BIN_B's `model init` when
# missing), appends each run's JSON line under "== NAME, run I" to OUT (NAME: the binary's folder's
# name) and prints one line a run: the decoding step's median, the share of the roofline, tokens a
# second and the prefill. `rollout_rounds OUT MODEL ROUNDS ARGS BIN...` does the same for any number
# of binaries (ARGS one string split at whitespace, so no argument may hold a space; empty for 8 x 8),
# in turn within each round.
# `rollout_profile OUT MODEL BIN...` profiles one `bench rollout` 8 x 8 generation of each binary on
# MODEL (traces in MODEL's folder's profile-NAME) and appends the period of a layer and of a decoding
# step in its graph replays (measurements/2026-12-01-dependent-launch-h200/layer_period.py) under
# "== NAME" to OUT.
# `unpack_builds WORK NAME:ARCHIVE...` unpacks each .device/ARCHIVE.tar.xz (a packed
# scripts/gpu/build.sh binary) into WORK/NAME. `cuda_tests OUT WORK ARCHIVE` unpacks
# .device/ARCHIVE.tar.xz (build.sh's test binaries) into WORK/tests, runs the tensor and training
# crates' tests (their CUDA tests among them) into OUT/tensor-tests.txt and OUT/train-tests.txt,
# prints their summaries and fails when the tensor crate's failed.
unpack_builds() {
  local work=$1 build
  shift
  for build in "$@"; do
    mkdir -p "$work/${build%%:*}"
    tar xJf ".device/${build#*:}.tar.xz" -C "$work/${build%%:*}" || return 1
  done
}

cuda_tests() {
  local out=$1 work=$2
  mkdir -p "$work/tests"
  tar xJf ".device/$3.tar.xz" -C "$work/tests" || return 1
  (cd crates/groundrl-tensor && timeout 150 "$work/tests/groundrl-tensor-tests" --test-threads 4) > "$out/tensor-tests.txt" 2>&1
  echo "rc=$?" >> "$out/tensor-tests.txt"
  (cd crates/groundrl-train && timeout 200 "$work/tests/groundrl-train-tests" --test-threads 8) > "$out/train-tests.txt" 2>&1
  echo "rc=$?" >> "$out/train-tests.txt"
  grep -hE "^test result|^rc=|FAILED|panicked|largest error" "$out/tensor-tests.txt" "$out/train-tests.txt" | head -12
  grep -q "^rc=0" "$out/tensor-tests.txt"
}
rollout_ab() {
  local out=$1 model=$2 a=$3 b=$4 rounds=${5:-3}
  shift $(($# < 5 ? $# : 5))
  rollout_rounds "$out" "$model" "$rounds" "$*" "$a" "$b"
}

rollout_rounds() {
  local out=$1 model=$2 rounds=$3 words=$4
  shift 4
  local binaries=("$@") args
  read -ra args <<< "$words"
  [ ${#args[@]} -gt 0 ] || args=(--prompts 8 --n 8)
  local last=${binaries[${#binaries[@]}-1]}
  if [ ! -d "$model" ]; then
    "$last" model init --preset 3b --tiny-tokenizer --dtype bf16 --device cuda --out "$model" > /dev/null || return 1
  fi
  for i in $(seq 1 "$rounds"); do
    for binary in "${binaries[@]}"; do
      echo "== $(basename "$(dirname "$binary")"), run $i" >> "$out"
      timeout 90 "$binary" bench rollout --model "$model" --dtype bf16 --device cuda "${args[@]}" \
        --bandwidth-gbs 4800 --repeats 5 >> "$out" 2> /dev/null
    done
  done
  python3 - "$out" <<'PY'
import json, sys
label = ""
for line in open(sys.argv[1]):
    if line.startswith("=="):
        label = line.strip("= \n")
    elif line.startswith("{"):
        r = json.loads(line)
        print(f"{label:12} step {r['decode_step_ms']:.3f} ms  {100 * r['roofline_fraction']:.2f}% of the roofline"
              f"  {r['generated_tokens_per_s']:.0f} tokens/s  prefill {r['prefill_seconds']:.3f} s")
PY
}

rollout_profile() {
  local out=$1 model=$2 binary name trace
  shift 2
  for binary in "$@"; do
    name=$(basename "$(dirname "$binary")")
    trace="$(dirname "$model")/profile-$name"
    timeout 90 "$binary" bench rollout --model "$model" --dtype bf16 --device cuda --prompts 8 --n 8 \
      --repeats 1 --profile "$trace" > /dev/null 2> "$trace.log"
    echo "== $name" >> "$out"
    python3 measurements/2026-12-01-dependent-launch-h200/layer_period.py "$trace/generate.json" >> "$out"
  done
}
