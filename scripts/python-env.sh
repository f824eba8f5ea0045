#!/usr/bin/env bash
# Creates (once) the throw-away Python environment that parity tests and benchmarks compare against:
# pycocotools 2.0.11 and numpy from PyPI, in the project's git-ignored cache. Prints the interpreter path.
#
# Usage: py=$(scripts/python-env.sh) && "$py" script.py
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${GROUNDRL_CACHE:-$root/.cache}/venv-reference
stamp=$venv/.groundrl-complete
if [ ! -f "$stamp" ]; then
  echo "python-env: creating $venv (pycocotools==2.0.11, numpy)" >&2
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "pycocotools==2.0.11" numpy >&2
  touch "$stamp"
fi
echo "$venv/bin/python"
