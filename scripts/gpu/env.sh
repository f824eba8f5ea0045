# Sourced by the GPU scripts that start `groundrl` workers or link libtorch (scaling.sh, zero.sh,
# kill-resume.sh, nccl-bench.sh, run.sh, step-profile.sh, bench/grpo-side-by-side.sh): torch's
# libraries (libtorch, NCCL, the CUDA run-time) on the loader's path, from $TORCH_LIB when set, else
# from the Python environment's torch ($PYTHON, default python3; a CPU check without torch runs the
# binary as built), and NVLink multicast (NCCL's NVLS algorithms) off, as in every run of these scripts
# recorded under measurements/.
if [ -n "${TORCH_LIB:-}" ]; then
  torch_lib=$TORCH_LIB
else
  torch_lib=$(${PYTHON:-python3} -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null)
fi
if [ -n "$torch_lib" ]; then
  export LD_LIBRARY_PATH=$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
