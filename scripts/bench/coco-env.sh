#!/usr/bin/env bash
# Creates (once) the Python environment scripts/bench/coco.sh times the COCO tools in: pycocotools and
# the faster reimplementations from PyPI, pinned, in the project's git-ignored cache (apart from the
# parity environment of scripts/python-env.sh, so that the peers' wheels never touch what parity runs
# against). Prints the interpreter path.
#
# Usage: py=$(scripts/bench/coco-env.sh) && "$py" script.py
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv=${GROUNDRL_CACHE:-$root/.cache}/venv-bench
packages=(pycocotools==2.0.11 numpy==2.4.6 faster-coco-eval==1.8.0 hotcoco==1.3.0 ultrafast-pycocotools==0.1.14)
stamp=$venv/.groundrl-complete
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${packages[*]}" ]; then
  echo "coco-env: creating $venv (${packages[*]})" >&2
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${packages[@]}" >&2
  echo "${packages[*]}" >"$stamp"
fi
echo "$venv/bin/python"
