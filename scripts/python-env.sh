#!/usr/bin/env bash
# Creates (once) the throw-away Python environment that parity tests, benchmarks and the Python
# package's tests use: pycocotools 2.0.11 and numpy (the references), maturin and pytest (to build
# and test crates/groundrl-py), from PyPI, in the project's git-ignored cache. Prints the interpreter
# path. The environment is rebuilt when the package list below changes.
#
# Usage: py=$(scripts/python-env.sh) && "$py" script.py
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${GROUNDRL_CACHE:-$root/.cache}/venv-reference
stamp=$venv/.groundrl-complete
packages=("pycocotools==2.0.11" numpy "maturin==1.16.0" "pytest==9.2.0")
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${packages[*]}" ]; then
  echo "python-env: creating $venv (${packages[*]})" >&2
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${packages[@]}" >&2
  echo "${packages[*]}" > "$stamp"
fi
echo "$venv/bin/python"
