#!/usr/bin/env bash
# The Python package's tests: builds the abi3 wheel of crates/groundrl-py with maturin (release), prints
# its size and platform tag, installs it (the wheel, not a development install) into the reference
# environment of scripts/python-env.sh (pycocotools 2.0.11, numpy, maturin, pytest, hydra-core),
# downloads verl's wheels for the verl config test, and runs crates/groundrl-py/tests with pytest from
# the tests folder, so that `import groundrl` is the installed wheel. With GROUNDRL_TRL=1 (as
# scripts/test.sh and so CI run it), then the TRL tests (crates/groundrl-py/tests/trl: TRL's
# GRPOTrainer for two steps on the CPU) in the environment of `scripts/python-env.sh trl` (torch,
# transformers, TRL; made once), printing how long the TRL part took, environment included; on a disk
# without room for that environment (about 8 GB) the TRL tests are left out and the output says so.
# Prints the script's own time. Exits non-zero when a test fails or an environment cannot be made.
#
# Env: CARGO_TARGET_DIR (where cargo builds; default target/), GROUNDRL_CACHE (the environments' folder),
# GROUNDRL_TRL=1 (also run the TRL tests).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
cache=${GROUNDRL_CACHE:-$root/.cache}
py=$(scripts/python-env.sh)
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
"$(dirname "$py")/maturin" build --release --quiet --out "$wheels" >&2
wheel=$(ls "$wheels"/groundrl-*.whl)
echo "python-test: built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB; platform tag: $(basename "$wheel" .whl | rev | cut -d- -f1 | rev))"
"$py" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"

# verl's wheels (no dependencies: the test reads their YAML config and a few torch-free files).
verl_wheels=$cache/verl-wheels
for version in 0.9.1 0.9.0 0.8.0; do
  if [ ! -f "$verl_wheels/verl-$version-py3-none-any.whl" ]; then
    "$py" -m pip download --quiet --disable-pip-version-check --no-deps "verl==$version" --dest "$verl_wheels" >&2 ||
      echo "python-test: could not download verl $version from PyPI; its config test will be skipped" >&2
  fi
done
export GROUNDRL_VERL_WHEELS=$verl_wheels

# From the tests folder, so that `import groundrl` is the installed wheel, not the source tree.
(cd crates/groundrl-py/tests && "$py" -m pytest -q -p no:cacheprovider -rs --ignore=trl .)

trl_start=$SECONDS
trl_status=0
if [ "${GROUNDRL_TRL:-0}" = 1 ]; then
  trl_py=$(scripts/python-env.sh trl) || trl_status=$?
fi
if [ "${GROUNDRL_TRL:-0}" != 1 ]; then
  echo "python-test: TRL tests not run (GROUNDRL_TRL=1 runs them)"
elif [ "$trl_status" = 3 ]; then
  # A machine without the disk for torch's CUDA libraries: said, not failed (the install would fail
  # half-way and could starve whatever else writes to the disk).
  echo "python-test: TRL tests NOT RUN: no room on this disk for their environment (see above)"
elif [ "$trl_status" != 0 ]; then
  echo "python-test: the TRL environment could not be installed (see above); GROUNDRL_TRL=0 leaves its tests out" >&2
  exit 1
else
  echo "python-test: TRL environment ready after $((SECONDS - trl_start)) s"
  "$trl_py" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
  (cd crates/groundrl-py/tests && "$trl_py" -m pytest -q -p no:cacheprovider -rs trl)
  echo "python-test: TRL environment and tests took $((SECONDS - trl_start)) s"
fi
echo "python-test: done in $SECONDS s"
