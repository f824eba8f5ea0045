#!/usr/bin/env bash
# The NCCL group on the GPU machine, in one go: exact collectives on CUDA tensors, all-reduce bus
# bandwidth from 1 MiB to 1 GiB, and one rank killed (the others must fail within the timeout).
# Starts one process of .device/nccl-bench (made by scripts/gpu/build.sh; the source is
# crates/groundrl-dist/examples/nccl_bench.rs) per GPU with torchrun's variables: every GPU visible,
# each rank on device LOCAL_RANK, the rendezvous on 127.0.0.1.
#
# Usage on the GPU machine: bash scripts/gpu/nccl-bench.sh [NPROC] [MAX_MIB]
#   NPROC: ranks (default: every GPU); MAX_MIB: the largest all-reduce (default 1024).
# Logs go to $OUT (default /tmp/groundrl-nccl); rank 0's bandwidth lines to $OUT/allreduce.jsonl.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
py=${PYTHON:-/opt/torch/.venv/bin/python}
PYTHON=$py
source "$root/scripts/gpu/env.sh"
bin=${BIN:-$root/.device/nccl-bench}
nproc=${1:-$(nvidia-smi -L | wc -l)}
max_mib=${2:-1024}
out=${OUT:-/tmp/groundrl-nccl}
mkdir -p "$out"

nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
nvidia-smi topo -m
$py -c 'import torch; print("python torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'

# Runs `$bin MODE ARGS...` as $nproc ranks within LIMIT seconds; rank r's output in $out/MODE-rank$r.log
# and its exit status in status[r].
launch() {
  local limit=$1 mode=$2
  shift 2
  local port
  port=$($py -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  local pids=()
  for ((r = 0; r < nproc; r++)); do
    RANK=$r WORLD_SIZE=$nproc LOCAL_RANK=$r LOCAL_WORLD_SIZE=$nproc MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout -s KILL "$limit" "$bin" "$mode" "$@" >"$out/$mode-rank$r.log" 2>&1 &
    pids+=($!)
  done
  status=()
  for ((r = 0; r < nproc; r++)); do
    wait "${pids[$r]}"
    status[$r]=$?
  done
}

summary=()
echo "== 1. check: exact collectives on CUDA tensors ($nproc ranks)"
launch 300 check
ok=1
for ((r = 0; r < nproc; r++)); do
  if [ "${status[$r]}" -ne 0 ] || ! grep -q "nccl check passed rank $r" "$out/check-rank$r.log"; then
    ok=0
    echo "-- rank $r: exit ${status[$r]}"
    tail -20 "$out/check-rank$r.log"
  fi
done
head -1 "$out/check-rank0.log"
summary+=("check: $([ $ok = 1 ] && echo passed || echo FAILED)")

echo "== 2. bench: all-reduce bus bandwidth, 1 MiB to $max_mib MiB ($nproc ranks)"
launch 600 bench "$max_mib"
grep '"op": "all_reduce"' "$out/bench-rank0.log" >"$out/allreduce.jsonl"
grep '^{' "$out/bench-rank0.log"
ok=1
for ((r = 0; r < nproc; r++)); do
  if [ "${status[$r]}" -ne 0 ]; then
    ok=0
    echo "-- rank $r: exit ${status[$r]}"
    tail -20 "$out/bench-rank$r.log"
  fi
done
summary+=("bench: $([ $ok = 1 ] && echo "$(wc -l <"$out/allreduce.jsonl") sizes" || echo FAILED)")

echo "== 3. kill: the last rank SIGKILLs itself; the others must fail within the 10 s timeout"
# 300 s: c10d's watchdog pauses about a minute for its flight-recorder dump before a failed group goes.
launch 300 kill 10
last=$((nproc - 1))
ok=1
# 137 = 128 + SIGKILL.
if [ "${status[$last]}" -ne 137 ] || ! grep -q "killing itself" "$out/kill-rank$last.log"; then
  ok=0
  echo "-- rank $last: exit ${status[$last]} (137 after its own SIGKILL expected)"
  tail -20 "$out/kill-rank$last.log"
fi
for ((r = 0; r < last; r++)); do
  if [ "${status[$r]}" -ne 0 ] || ! grep -q "nccl kill passed rank $r" "$out/kill-rank$r.log"; then
    ok=0
    echo "-- rank $r: exit ${status[$r]}"
    tail -20 "$out/kill-rank$r.log"
  else
    grep -E "nccl kill passed|was dropped in" "$out/kill-rank$r.log"
  fi
done
summary+=("kill: $([ $ok = 1 ] && echo passed || echo FAILED)")

echo "== summary ($nproc ranks; logs in $out)"
printf '%s\n' "${summary[@]}"
