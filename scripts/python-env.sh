#!/usr/bin/env bash
# Creates (once) the throw-away Python environment that parity tests, benchmarks and the Python
# package's tests use: pycocotools 2.0.11 and numpy (the references), maturin and pytest (to build
# and test crates/groundrl-py), hydra-core (to compose verl's packaged config in the verl test),
# from PyPI, in the project's git-ignored cache. Prints the interpreter path. The environment is
# rebuilt when the package list below changes.
#
# `scripts/python-env.sh trl` makes (once) the environment of the TRL tests instead: torch 2.11.0,
# transformers, TRL, accelerate and datasets, numpy and pytest, all from PyPI (the only package index
# CI can reach: PyPI's torch brings its NVIDIA libraries, about 2.4 GB to download and 5 GB installed,
# though the tests run on the CPU). It exits non-zero, leaving nothing half-made, when an install fails
# (no network), and with status 3, before downloading anything, when the disk has no room for it:
# about 8 GB at its peak (the wheels staged, 2.7 GB, then 5.1 GB installed; measured 2026-11-29),
# plus $GROUNDRL_ENV_SPARE_GB (default 0) left for whatever runs beside it.
#
# Usage: py=$(scripts/python-env.sh) && "$py" script.py
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ "${1:-}" = trl ]; then
  venv=${GROUNDRL_CACHE:-$root/.cache}/venv-trl
  packages=("torch==2.11.0" "transformers==5.17.0" "trl==1.16.0" "accelerate==1.15.0" "datasets==5.2.0" numpy "pytest==9.2.0")
else
  venv=${GROUNDRL_CACHE:-$root/.cache}/venv-reference
  packages=("pycocotools==2.0.11" numpy "maturin==1.16.0" "pytest==9.2.0" "hydra-core==1.3.2")
fi
stamp=$venv/.groundrl-complete
wanted="${packages[*]}"
# No pip cache: the wheels would take as much disk again (2.4 GB for torch's).
pip=(--quiet --disable-pip-version-check --no-cache-dir)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
  if [ "${1:-}" = trl ]; then
    # An outdated environment goes first: its room counts.
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")" "${TMPDIR:-/tmp}"
    # pip stages the wheels in $TMPDIR; the smaller of the two file systems' room is what counts.
    free_mb=$(df -P -BM "$(dirname "$venv")" "${TMPDIR:-/tmp}" | awk 'NR > 1 { gsub("M", "", $4); print $4 }' | sort -n | head -1)
    free_gb=$((free_mb / 1024))
    need_gb=$((8 + ${GROUNDRL_ENV_SPARE_GB:-0}))
    if [ "$free_gb" -lt "$need_gb" ]; then
      echo "python-env: $free_gb GB of disk free; the TRL environment needs $need_gb GB (torch with its CUDA libraries from PyPI): not made" >&2
      exit 3
    fi
  fi
  echo "python-env: creating $venv ($wanted)" >&2
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  if ! "$venv/bin/python" -m pip install "${pip[@]}" "${packages[@]}" >&2; then
    rm -rf "$venv"
    echo "python-env: could not install $wanted" >&2
    exit 1
  fi
  echo "$wanted" > "$stamp"
fi
echo "$venv/bin/python"
