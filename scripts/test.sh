#!/usr/bin/env bash
# The project's whole test suite, from a fresh machine: sets up libtorch (scripts/setup-libtorch.sh) and
# the reference Python environment on first use, installs Chromium for the report's browser test, checks
# formatting and lints, runs every Rust test, then every parity script against the reference
# implementations (scripts/parity/*.sh), and finally builds the Python wheel and runs its pytest suite
# (scripts/python-test.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

eval "$(scripts/setup-libtorch.sh)"

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings

# The report's browser test (crates/groundrl/tests/cli_report.rs) renders a page in headless Chromium.
if ! command -v chromium >/dev/null; then
  echo "== apt-get install chromium"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi

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

echo "== scripts/python-test.sh"
scripts/python-test.sh
