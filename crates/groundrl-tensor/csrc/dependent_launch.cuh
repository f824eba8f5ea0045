// Programmatic dependent launch (sm_90 and later): a kernel launched with `launch_dependent` may start
// while the kernel before it in the stream still runs, once every block of that one has called
// `allow_dependents` (or exited). Until it calls `wait_prerequisites` it may read only what no kernel
// still running writes (weights, a cache's older columns) and write nothing: that wait returns when
// the kernel before it has finished and its writes are visible. A decoding step is a chain of short
// kernels, each paying its start (blocks placed, barriers set up, the first copies in flight) after
// the previous one's end; so the next one's start and first reads overlap the previous one's work.
// A kernel that calls `allow_dependents` only after its own wait lets the next one start once the
// kernel two back has ended: the next one may then read, before its own wait, what that kernel wrote,
// through L2 (copies to shared memory, `__ldcg`), which is where those writes are (the per-row
// attention kernel reads the rotation's output so while the prompt kernel runs; decode_attention.cu).
// A captured CUDA graph keeps these launches as programmatic edges. Elsewhere (sm_80, or launched
// plainly) both device calls do nothing: the stream's order holds as usual.

#pragma once

#include <cuda_runtime.h>

#include <utility>

// Lets the stream's next kernel start (if it was launched with `launch_dependent`).
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Waits until the kernel before this one in the stream has finished, its writes visible.
__device__ __forceinline__ void wait_prerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// `kernel<<<grid, block, shared, stream>>>(args...)`, allowed to start before the kernel before it ends
// (see above). For sm_90 GPUs only: the callers launch plainly elsewhere.
template <typename... Params, typename... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                             cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// Whether the current device starts a kernel launched with `launch_dependent` early (sm_90 and
// later).
inline bool dependent_launches() {
  int device = 0, major = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         major >= 9;
}

// `launch_dependent` where the device starts such launches early, else a plain launch: for kernels
// that run on every GPU and call `allow_dependents`/`wait_prerequisites` (no-ops elsewhere).
template <typename... Params, typename... Args>
cudaError_t launch_chained(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                           cudaStream_t stream, Args&&... args) {
  if (dependent_launches()) {
    return launch_dependent(kernel, grid, block, shared, stream, std::forward<Args>(args)...);
  }
  kernel<<<grid, block, shared, stream>>>(std::forward<Args>(args)...);
  return cudaSuccess;
}

// Lets `kernel` use `bytes` of dynamic shared memory (over the 48 KiB default it must be asked for; a
// host-side setting, not in a graph), with as much of the SM's memory as shared memory as can be, so
// that a kernel started during the one before it (above) finds room beside that one's blocks.
template <typename Kernel>
cudaError_t allow_shared(Kernel kernel, int bytes) {
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess) return e;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                              cudaSharedmemCarveoutMaxShared);
}
