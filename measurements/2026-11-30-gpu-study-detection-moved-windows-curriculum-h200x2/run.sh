#!/usr/bin/env bash
# The learning runs of one two-GPU machine, side by side (docs/learning.md), each a demo of three
# seeds on the GPU preset:
#   study       `groundrl demo --gpu --study` on GPU 0: the supervised baseline run until its validation
#               stops improving, then GRPO, on the test set and seven out-of-distribution sets;
#   moved       the same study on GPU 1 with `--window anywhere`: every set's window placed anywhere
#               in the image, so that elements move between screenshots (the study's default
#               window fills the image, and its models answer from places: docs/learning.md);
#   plain       `groundrl demo --gpu` on GPU 1 (the shipped demo: the one-GPU arm of the next two);
#   curriculum  on GPU 0, two rounds of 100 GRPO steps, the second on the pool the pass-rate
#               ledger selects (`rounds.count=2`), against the plain demo's 200 steps on fresh tasks
#               (up to 10 passes over that pool: at 2, pools of 1,833-4,081 tasks ran out after
#               29-64 steps, 2026-11-30);
#   dp          `groundrl demo --gpu --nproc-per-node 2`: each seed on both GPUs, data-parallel (NCCL),
#               the same algorithm as the plain demo's one GPU.
# The small model leaves each GPU mostly idle, so these share the GPUs; the runs are measured for
# what they learn, not for their speed.
#
# The runs outlast one command's ten minutes, so they run in a process session of their own:
#   bash scripts/gpu/learning.sh start     # starts them and returns
#   bash scripts/gpu/learning.sh wait 570  # a progress line a minute until they end or 570 s pass
#   bash scripts/gpu/learning.sh collect   # stops what still runs; tables and files under $OUT
# Expects the GPU build at .device/groundrl (scripts/gpu/build.sh). LEARNING_RUNS names the runs
# (default "study moved plain curriculum dp"); STUDY_OVERRIDES are added to the study's command line.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
parts=learning
source "$root/scripts/gpu/session.sh"
all="study moved plain curriculum dp"
runs=" ${LEARNING_RUNS:-$all} "
dir=$work/learning
status=$dir/status

# Runs demo `$1` on cores `$2` with the options after it, its output in $dir/$1.txt, its exit status
# in $status.
demo() {
  local name=$1 cores=$2; shift 2
  local s=$SECONDS
  taskset -c "$cores" "$bin" demo --gpu --out "$dir/$name" "$@" > "$dir/$name.txt" 2>&1
  echo "$name: exit $? after $((SECONDS - s)) s" >> "$status"
}

runs() {
  cd "$dir" || exit 1
  # Each run on its own share of the cores: libtorch's CPU threads of eight processes on every core
  # left the GPUs idle (a load of 88 on 32 cores, warm-up steps about 20 times slower).
  local names=() name
  for name in $all; do [[ $runs == *" $name "* ]] && names+=("$name"); done
  local share=$(($(nproc) / ${#names[@]})) i=0
  declare -A cores
  for name in "${names[@]}"; do
    # (fewer cores than runs: all of them for each)
    [ "$share" -gt 0 ] && cores[$name]=$((i * share))-$(((i + 1) * share - 1)) || cores[$name]=0-$(($(nproc) - 1))
    i=$((i + 1))
  done
  # shellcheck disable=SC2086 # the overrides are words
  [ -n "${cores[study]:-}" ] && CUDA_VISIBLE_DEVICES=0 demo study "${cores[study]}" --study \
    trainer.held_out_freq=100 ${STUDY_OVERRIDES:-} &
  # shellcheck disable=SC2086 # the overrides are words
  [ -n "${cores[moved]:-}" ] && CUDA_VISIBLE_DEVICES=1 demo moved "${cores[moved]}" --study --window anywhere \
    trainer.held_out_freq=100 ${STUDY_OVERRIDES:-} &
  [ -n "${cores[plain]:-}" ] && CUDA_VISIBLE_DEVICES=1 demo plain "${cores[plain]}" &
  [ -n "${cores[curriculum]:-}" ] && CUDA_VISIBLE_DEVICES=0 demo curriculum "${cores[curriculum]}" \
    rounds.count=2 trainer.max_steps=100 trainer.total_epochs=10 &
  [ -n "${cores[dp]:-}" ] && demo dp "${cores[dp]}" --nproc-per-node 2 &
  wait
  echo "all ended" >> "$status"
}

# One line of where the runs are: the status file, each demo's last seed line, the GPUs' use.
progress() {
  local line="$(date +%T)"
  for name in $all; do
    [ -f "$dir/$name.txt" ] || continue
    line+=" | $name: $(grep -cE '^seed [0-9]+: held-out accuracy' "$dir/$name.txt") seeds done"
  done
  line+=" | GPUs $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader | tr '\n' ';')"
  echo "$line"
}

case "${1:-}" in
  start)
    rm -rf "$dir" && mkdir -p "$dir"
    setsid nohup bash "$root/scripts/gpu/learning.sh" runs > "$dir/driver.log" 2>&1 < /dev/null &
    sleep 5
    echo "started: $runs"
    ;;
  runs) runs ;;
  wait)
    end=$((SECONDS + ${2:-570}))
    while [ $SECONDS -lt "$end" ] && ! grep -q "all ended" "$status" 2> /dev/null; do
      progress
      sleep 60
    done
    cat "$status" 2> /dev/null
    ;;
  collect)
    pkill -f "learning.sh runs" ; pkill -f "groundrl demo" && echo "stopped the runs still going"
    cat "$status" 2> /dev/null
    for name in $all; do
      [ -f "$dir/$name.txt" ] || continue
      echo "== $name"
      grep -E '^(seed [0-9]+:|\||mean|every|demo)' "$dir/$name.txt"
    done
    # What the studies' models click (scripts/study/by_kind.py), on the test set and the unseen layout.
    for name in study moved; do
      for set in test unseen-layout; do
        [ -d "$dir/$name/seed-0/eval" ] && "$py" "$root/scripts/study/by_kind.py" "$dir/$name" $set \
          > "$out/by-kind-$name-$set.md" 2>&1
      done
    done
    # Each demo's output, summary, and each seed's config, warm-up log, step records and curriculum
    # files; not the answers of every evaluation (the summary holds the study's curves).
    (cd "$dir" && tar -cJf "$out/learning.tar.xz" --exclude='*/data' --exclude='*/eval' --exclude='*/checkpoints' \
      --exclude='*/initial-model' --exclude='*/tensorboard' --exclude='*/report.html' ./*.txt status */summary.json \
      */seed-*) 2> "$out/tar-errors.txt"
    ls -la "$out"
    ;;
  *) echo "usage: $0 start | wait SECONDS | collect" >&2; exit 2 ;;
esac
