#!/usr/bin/env bash
# Builds the GPU (`cuda` feature) release binary here and puts a stripped copy in the git-ignored
# .device/ folder, which the device tool carries to the GPU machine (see scripts/gpu/run.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
eval "$(scripts/setup-libtorch.sh)"
eval "$(scripts/gpu/cuda-toolkit.sh)"
CARGO_TARGET_DIR="$root/target/cuda" cargo build --release --features cuda -p groundrl
mkdir -p .device
cp target/cuda/release/groundrl .device/groundrl
strip .device/groundrl
# The tensor crate's unit tests for CUDA (scripts/gpu/run.sh kernels runs them on the GPU machine).
tests=$(CARGO_TARGET_DIR="$root/target/cuda" cargo test --release --features cuda -p groundrl-tensor --lib --no-run \
  --message-format=json | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["lib"]:
        print(m["executable"])')
cp "$tests" .device/groundrl-tensor-tests
strip .device/groundrl-tensor-tests
ls -la .device/groundrl .device/groundrl-tensor-tests
