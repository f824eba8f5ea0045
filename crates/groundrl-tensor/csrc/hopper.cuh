// What the Hopper (sm_90a) kernels share: mbarriers, tensor-map copies into shared memory with the
// 128-byte swizzle, `wgmma`'s shared-memory descriptors, and the host side's tensor maps.
// Included by gate_up_swiglu.cu, prompt_attention.cu and split_product.cu (one library each, built for
// sm_90a alone).

#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "dependent_launch.cuh"
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

// d (+)= a (64 x 16, at descriptor a) @ b (64 x 16, at descriptor b)^T, both K-major in shared
// memory, 32 f32 a thread of the warp group: acc[4 j .. 4 j + 3] hold row t's columns 8 j + 2 (lane %
// 4) and the next, then row t + 8's, with t = 16 warp + lane / 4. With `accumulate` 0 (scale-d) the
// products overwrite d.
__device__ __forceinline__ void mma_64x64(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(accumulate));
}

// The barriers of a kernel's `kStages` stages, set by the block's first thread before any thread
// uses them: a slot's copies landed (`full`: one arrival, with the bytes) and its products done
// (`empty`: one arrival from each of `warps` warps).
template <int kStages>
__device__ __forceinline__ void init_stages(uint64_t* full, uint64_t* empty, int warps) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(shared_address(&full[s]), 1);
      barrier_init(shared_address(&empty[s]), warps);
    }
    fence_barrier_init();
  }
  __syncthreads();
}

// The copy warp's side of a kernel's stages, on one lane: stage i's copies into slot i % kStages
// (`stage_bytes` apart from `base`), `weights(i, stage, bar)` and `rest(i, stage, bar)` (what the
// kernel ahead writes), both completing on the slot's barrier `bar` (`full`), whose expected bytes
// (`copy_bytes`, the two together) are set first. The first kStages stages (all of them, when fewer) take their slots unasked, their
// weights copied before waiting for the kernel ahead (dependent_launch.cuh); every later stage once
// the products have freed its slot (`empty`).
template <int kStages, typename Weights, typename Rest>
__device__ __forceinline__ void copy_stages(int steps, uint64_t* full, uint64_t* empty, uint32_t base,
                                            int stage_bytes, int copy_bytes, Weights weights,
                                            Rest rest) {
  const auto copy_weights = [&](int i) {
    const uint32_t bar = shared_address(&full[i % kStages]);
    expect_bytes(bar, copy_bytes);
    weights(i, base + (i % kStages) * stage_bytes, bar);
  };
  const auto copy_rest = [&](int i) {
    rest(i, base + (i % kStages) * stage_bytes, shared_address(&full[i % kStages]));
  };
  const int early = steps < kStages ? steps : kStages;
  for (int i = 0; i < early; ++i) copy_weights(i);
  wait_prerequisites();
  for (int i = 0; i < early; ++i) copy_rest(i);
  for (int i = early; i < steps; ++i) {
    barrier_wait(shared_address(&empty[i % kStages]), (i / kStages - 1) & 1);
    copy_weights(i);
    copy_rest(i);
  }
}

// The warp group's side: once stage i's copies have landed (`full`), `products(address)` issues its
// products from the slot at `address`; the slot before it is freed once its products are done (at
// most one stage's in flight, whose registers `acc` holds). Returns with every product done.
template <int kStages, int N, typename Products>
__device__ __forceinline__ void multiply_stages(float (&acc)[N], int steps, uint64_t* full,
                                                uint64_t* empty, uint32_t base, int stage_bytes,
                                                int lane, Products products) {
  for (int i = 0; i < steps; ++i) {
    const int slot = i % kStages;
    barrier_wait(shared_address(&full[slot]), (i / kStages) & 1);
    wgmma_fence();
    products(base + slot * stage_bytes);
    wgmma_commit();
    wgmma_wait<1>();
    fence_operands(acc);
    if (i > 0 && lane == 0) barrier_arrive(shared_address(&empty[(i - 1) % kStages]));
  }
  wgmma_wait<0>();
  fence_operands(acc);
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
