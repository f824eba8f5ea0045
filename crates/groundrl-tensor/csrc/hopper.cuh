// What the Hopper (sm_90a) kernels share: mbarriers, tensor-map copies into shared memory with the
// 128-byte swizzle, `wgmma`'s shared-memory descriptors, and the host side's tensor maps.
// Included by gate_up_swiglu.cu and prompt_attention.cu (one library, built for sm_90a alone).

#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "hopper_launch.h"

namespace hopper {

using bf16 = __nv_bfloat16;

constexpr int kSwizzleCols = 64;  // bf16 columns of a swizzled tile's row: 128 bytes

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void barrier_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}

__device__ __forceinline__ void barrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

__device__ __forceinline__ void barrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void expect_bytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// The barriers' initialization made visible to the copy engine, before any thread uses them.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// The (64 columns x box rows) tile at column `col`, row `row` of `map`'s matrix into `dst`.
__device__ __forceinline__ void copy_tile(uint32_t dst, const CUtensorMap* map, int col, int row,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3}], [%4];\n" ::"r"(dst),
      "l"(map), "r"(col), "r"(row), "r"(bar)
      : "memory");
}

// A shared-memory operand of wgmma in 128-byte swizzled rows as the tensor-map copies write them:
// groups of 8 rows 1,024 bytes apart (`stride`), and for an operand whose rows hold its n (or m)
// dimension (`transposed`, "MN-major"), the next 64 columns `leading` bytes further.
__device__ __forceinline__ uint64_t descriptor(uint32_t address, uint32_t leading = 16) {
  return (uint64_t)((address >> 4) & 0x3FFF) | ((uint64_t)(leading >> 4) << 16) | (64ull << 32) |
         (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps accumulators in their registers across the asynchronous products.
template <int N>
__device__ __forceinline__ void fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

inline PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// A tensor map over the bf16 matrix at `data`, (rows, cols) with rows `row_elems` apart, read in
// (box_rows, 64) tiles with the 128-byte swizzle; rows past `rows` read as zeros.
inline bool tile_map(CUtensorMap* map, const void* data, int64_t rows, int64_t cols,
                     int64_t row_elems, int box_rows) {
  const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
  const cuuint64_t strides[1] = {(cuuint64_t)row_elems * 2};
  const cuuint32_t box[2] = {kSwizzleCols, (cuuint32_t)box_rows}, unit[2] = {1, 1};
  return encoder()(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(data), dims, strides,
                   box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// CUDA device `device`'s compute capability as 10 major + minor (90 for an H100 or H200), 0 when it
// cannot be read.
inline int compute_capability(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    return 0;
  }
  return 10 * major + minor;
}

// Whether the current device is an sm_90 GPU the tensor maps can be encoded for; its SMs in `sms`.
inline bool hopper_device(int* sms) {
  int device = 0;
  return encoder() != nullptr && cudaGetDevice(&device) == cudaSuccess &&
         compute_capability(device) == 90 &&
         cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess;
}

}  // namespace hopper
