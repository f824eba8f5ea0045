#!/usr/bin/env bash
# Builds the GPU (`cuda` feature) release binary here and puts a stripped copy in the git-ignored
# .device/ folder, which the device tool carries to the GPU machine (see scripts/gpu/run.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
eval "$(scripts/setup-libtorch.sh)"
eval "$(scripts/gpu/cuda-headers.sh)"
CARGO_TARGET_DIR="$root/target/cuda" cargo build --release --features cuda -p groundrl
mkdir -p .device
cp target/cuda/release/groundrl .device/groundrl
strip .device/groundrl
ls -la .device/groundrl
