#!/usr/bin/env bash
# Runs a study of `groundrl demo` variants over seeds, JOBS processes at a time, THREADS libtorch
# threads each, then prints one table (scripts/study/table.py): per variant, each seed's held-out
# gain and the mean gain with its 95% t interval.
#
# Usage: scripts/study/run.sh OUT VARIANTS_FILE [SEEDS] [JOBS] [THREADS] [-- demo args...]
#   VARIANTS_FILE: one variant a line, `name override override ...` (blank lines and # comments
#   skipped); `base` with no override is the shipped config.
#   SEEDS: how many seeds per variant (default 3); JOBS: parallel runs (default 1); THREADS: torch
#   threads per run (default: all cores / JOBS).
# The binary is $GROUNDRL_BIN, else the release build (scripts/groundrl builds it).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$1 variants=$2 seeds=${3:-3} jobs=${4:-1}
threads=${5:-$(( $(nproc) / jobs > 0 ? $(nproc) / jobs : 1 ))}
shift $(( $# < 5 ? $# : 5 ))
[ "${1:-}" = "--" ] && shift
bin=${GROUNDRL_BIN:-$root/target/release/groundrl}
mkdir -p "$out"
tasks=()
while read -r name rest; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  for ((s = 0; s < seeds; s++)); do tasks+=("$name $s $rest"); done
done <"$variants"
run_one() { # name seed overrides...
  local name=$1 seed=$2; shift 2
  OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads RAYON_NUM_THREADS=$threads \
    "$bin" demo --out "$out/$name.s$seed" --first-seed "$seed" --seeds 1 "${demo_args[@]}" "$@" \
    >"$out/$name.s$seed.log" 2>&1
  echo "$(date +%T) done $name seed $seed (exit $?)"
}
demo_args=("$@")
running=0
for task in "${tasks[@]}"; do
  # shellcheck disable=SC2086
  run_one $task &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait
python3 "$root/scripts/study/table.py" "$out"
