# Sourced by the GPU machine's measurement scripts (run.sh, qwen3_vl.sh) once they have set $root and
# $parts (the parts asked for): the GPU machine's Python ($PYTHON, default /opt/torch/.venv/bin/python)
# as $py, torch's libraries on the loader's path (env.sh), the GPU build of the CLI as $bin, the work and
# output folders ($WORK, default /tmp/groundrl-gpu; $OUT, default $WORK/out), the GPU's name and memory
# printed, `want PART` (whether PART was asked for), $bw (the GPU's memory bandwidth in GB/s for the
# rollout roofline: 3,350 on an H100 SXM, else the H200's 4,800) and $gpu_gib (its memory in whole GiB,
# for `groundrl plan` and `train --gpu-memory`).
py=${PYTHON:-/opt/torch/.venv/bin/python}
PYTHON=$py
source "$root/scripts/gpu/env.sh"
bin=$root/.device/groundrl
work=${WORK:-/tmp/groundrl-gpu}
out=${OUT:-$work/out}
mkdir -p "$work" "$out"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
want() { [[ " $parts " == *" $1 "* ]]; }
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in *H100*) bw=3350 ;; *) bw=4800 ;; esac
gpu_gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | awk '{printf "%d", $1/1024}')
