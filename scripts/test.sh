#!/usr/bin/env bash
# The project's whole test suite, from a fresh machine: sets up libtorch (scripts/setup-libtorch.sh) and
# the reference Python environment on first use, installs Chromium for the report's browser test, checks
# formatting and lints, runs every Rust test, then every parity script against the reference
# implementations (scripts/parity/*.sh), and finally builds the Python wheel and runs its pytest suite
# with TRL's (scripts/python-test.sh).
#
# The two Python environments (scripts/python-env.sh: the reference one, and TRL's with torch, about
# 2 minutes to download and install on a fresh machine) are made in the background while the Rust
# tests build, at the lowest CPU and I/O priority, so that their download adds little to the suite's
# time and takes little from the build.
#
# Env: GROUNDRL_TRL=0 leaves out the TRL tests and their environment (5 GB installed; on a disk with
# less than about 8 GB free they are left out anyway, and the output says so).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

eval "$(scripts/setup-libtorch.sh)"

export GROUNDRL_TRL=${GROUNDRL_TRL:-1}
envs_log=$(mktemp)
(
  nice -n 19 ionice -c 3 scripts/python-env.sh >/dev/null
  # Beside the build only with 4 GB to spare for it (a debug build of every target took 1.5 GB);
  # else python-test.sh tries again once the build is done.
  if [ "$GROUNDRL_TRL" = 1 ]; then
    GROUNDRL_ENV_SPARE_GB=4 nice -n 19 ionice -c 3 scripts/python-env.sh trl >/dev/null
  fi
) >"$envs_log" 2>&1 &
envs=$!

echo "== cargo fmt --check"
cargo fmt --all -- --check

# The report's browser test (crates/groundrl/tests/cli_report.rs) renders a page in headless Chromium.
if ! command -v chromium >/dev/null; then
  echo "== apt-get install chromium"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi

# Clippy lints the workspace's crates while they are compiled for the tests (clippy-driver as the
# workspace's rustc wrapper, what `cargo clippy` runs under `cargo check`), so the dependencies are
# compiled once instead of once checked for `cargo clippy` and once built for the tests: about 6.6
# minutes less on 2 cores. Every target is built, the benchmarks too; warnings are errors.
echo "== cargo test: build every target, linted by clippy (-D warnings)"
clippy_driver=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver)
lint=(env RUSTC_WORKSPACE_WRAPPER="$clippy_driver" RUSTFLAGS="${RUSTFLAGS:-} -D warnings")
"${lint[@]}" cargo test --workspace --all-targets --no-run

echo "== cargo test"
"${lint[@]}" cargo test --workspace

echo "== Python environments (made in the background)"
envs_start=$SECONDS
# A failure here is not fatal: python-test.sh tries again and says what failed.
wait "$envs" || true
cat "$envs_log"
rm -f "$envs_log"
# The parity scripts and the Python tests use them.
echo "Python environments ready after $((SECONDS - envs_start)) s more"

shopt -s nullglob
parity=(scripts/parity/*.sh)
if [ ${#parity[@]} -gt 0 ]; then
  # `cargo test` built the binary for the CLI tests; a separate `cargo build` could resolve other
  # features and rebuild the dependency tree. COCO's live parity runs 30 generated cases here (60 by
  # default): the Python tests check 30 more against pycocotools, and the Rust tests the fixture.
  export GROUNDRL_BIN=$PWD/target/debug/groundrl COCO_PARITY_CASES=${COCO_PARITY_CASES:-30}
  for script in "${parity[@]}"; do
    echo "== $script"
    bash "$script"
  done
fi

echo "== scripts/python-test.sh"
scripts/python-test.sh
