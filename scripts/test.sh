#!/usr/bin/env bash
# The project's whole test suite, from a fresh machine: sets up libtorch (scripts/setup-libtorch.sh) and
# the reference Python environment on first use, checks formatting and lints, runs every Rust test, then
# every parity script against the reference implementations (scripts/parity/*.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

eval "$(scripts/setup-libtorch.sh)"

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings

echo "== cargo test"
cargo test --workspace

shopt -s nullglob
parity=(scripts/parity/*.sh)
if [ ${#parity[@]} -gt 0 ]; then
  # `cargo test` built the binary for the CLI tests; a separate `cargo build` could resolve other
  # features and rebuild the dependency tree.
  export GROUNDRL_BIN=$PWD/target/debug/groundrl
  for script in "${parity[@]}"; do
    echo "== $script"
    bash "$script"
  done
fi
