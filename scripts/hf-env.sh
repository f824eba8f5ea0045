#!/usr/bin/env bash
# Creates (once) the Python environment the HF parity goldens are made with: transformers 5.17.0,
# torch 2.11.0 and torchvision 0.26.0 from PyPI (the CUDA wheels; they run on the CPU too), pillow,
# numpy and safetensors, in the project's git-ignored cache. About 5 GB, so CI does not install it:
# CI checks the committed goldens. Prints the interpreter path.
#
# Usage: py=$(scripts/hf-env.sh) && "$py" scripts/goldens/qwen2_5_vl.py
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${GROUNDRL_CACHE:-$root/.cache}/venv-hf
stamp=$venv/.groundrl-complete
if [ ! -f "$stamp" ]; then
  echo "hf-env: creating $venv (transformers==5.17.0, torch==2.11.0, torchvision==0.26.0)" >&2
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check torch==2.11.0 torchvision==0.26.0 \
    transformers==5.17.0 pillow numpy safetensors >&2
  touch "$stamp"
fi
echo "$venv/bin/python"
