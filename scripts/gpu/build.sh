#!/usr/bin/env bash
# Builds the GPU (`cuda` feature) release binary (target/cuda/release/groundrl) and puts a stripped copy
# in the git-ignored .device/ folder, for a GPU machine that runs it without a build (scripts/gpu/run.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
eval "$(scripts/setup-libtorch.sh)"
eval "$(scripts/gpu/cuda-toolkit.sh)"
CARGO_TARGET_DIR="$root/target/cuda" cargo build --release --features cuda -p groundrl
mkdir -p .device
cp target/cuda/release/groundrl .device/groundrl
strip .device/groundrl
# The unit tests of the tensor and training crates for CUDA (scripts/gpu/run.sh kernels runs them on the
# GPU machine): the kernels against the compositions they replace.
for crate in groundrl-tensor groundrl-train; do
  tests=$(CARGO_TARGET_DIR="$root/target/cuda" cargo test --release --features cuda -p $crate --lib --no-run \
    --message-format=json | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["lib"]:
        print(m["executable"])')
  cp "$tests" .device/$crate-tests
  strip .device/$crate-tests
done
# The NCCL group's check and bandwidth program (scripts/gpu/nccl-bench.sh runs it on the GPU machine).
CARGO_TARGET_DIR="$root/target/cuda" cargo build --release --features cuda -p groundrl-dist --example nccl_bench
cp target/cuda/release/examples/nccl_bench .device/nccl-bench
strip .device/nccl-bench
ls -la .device/groundrl .device/groundrl-tensor-tests .device/groundrl-train-tests .device/nccl-bench
