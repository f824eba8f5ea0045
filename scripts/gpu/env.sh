# Sourced by the GPU scripts that start `groundrl` workers (scaling.sh, zero.sh): torch's libraries
# (libtorch, NCCL, the CUDA run-time) on the loader's path when the Python environment has torch
# (a CPU check without it runs the binary as built), and NVLink multicast (NCCL's NVLS algorithms)
# off, as in every run recorded under docs/gpu-runs.
if torch_lib=$(${PYTHON:-python3} -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null); then
  export LD_LIBRARY_PATH=$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
