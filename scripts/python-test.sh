#!/usr/bin/env bash
# The Python package's tests: builds the wheel of crates/groundrl-py with maturin (release), installs
# it into the reference environment (scripts/python-env.sh: pycocotools 2.0.11, numpy, maturin,
# pytest) and runs crates/groundrl-py/tests with pytest. Exits non-zero when a test fails.
#
# Env: CARGO_TARGET_DIR (where cargo builds; default target/), GROUNDRL_CACHE (the venv's folder).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
py=$(scripts/python-env.sh)
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
"$(dirname "$py")/maturin" build --release --quiet --out "$wheels" >&2
"$py" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheels"/groundrl-*.whl
# Run from the tests folder so that `import groundrl` is the installed wheel, not the source tree.
cd crates/groundrl-py/tests
exec "$py" -m pytest -q -p no:cacheprovider .
