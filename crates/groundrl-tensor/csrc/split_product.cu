// A decoding step's products on Hopper GPUs: x (up to 64 rows, k) times a weight (n, k)^T as `splits`
// partial products over slices of k, each written in f32 for the kernel after it, which sums them:
// for the output projections (o_proj, down_proj) kernels.cu's add_rms_norm, into the residual, then
// the norm; for q|k|v kernels.cu's decode_rotary_write, with the bias, then the rotation. Where
// cuBLAS's product starts when the kernel before it has ended, this one is launched to start during
// it (dependent_launch.cuh), and lets the kernel after it start once it has waited.
//
// Block (c, s) takes the weight's output rows [64 c, 64 c + 64) over slice s of k: its warp group
// (four warps) multiplies x's 64 rows (the 64-row operand of `wgmma.m64n64k16`) by the tile's 64 rows
// in 64-column stages; a fifth warp copies each stage into shared memory with the copy engine (two
// `cp.async.bulk.tensor.2d` copies, weight and x, through tensor maps with the 128-byte swizzle both
// operands of `wgmma` read, rows past the end read as zeros), twelve stages (192 KiB) in flight, each
// freed on an mbarrier once its products are done. Slice s holds k's 64-column chunks [s chunks /
// splits, (s + 1) chunks / splits); its sums run in their own order (the crate's CUDA test bounds
// them against the exact products).
//
// Before waiting for the kernel ahead (which writes x and may still read the memory of `parts`), a
// block copies the weights of its first twelve stages, all of a slice when they fit: o_proj's (8
// chunks a slice at the 3B shape) while the attention kernel ahead still runs, down_proj's first 12
// of 43 chunks while the gate|up kernel still runs, by the blocks placed on the SMs that kernel leaves
// free or frees first (its blocks take 121 KiB of shared memory, so none of these shares an SM with
// one). Measured on one H200 (measurements/2026-12-02-split-product-h200), down_proj's early copies
// made the gate|up kernel 1.3 us longer and ended down_proj 0.8 us sooner than copying its weights
// only after the wait; six stages, few enough to share an SM with the gate|up kernel's blocks, read
// down_proj's weight slower than twelve.
//
// Built for sm_90a only (`wgmma`); the launcher answers kHopperUnsupported on other GPUs and shapes, and
// the caller takes cuBLAS's batched product.

#include "dependent_launch.cuh"
#include "hopper.cuh"

namespace {

using namespace hopper;

constexpr int kRows = 64;   // x's rows a launch (wgmma's m); rows past the count read as zeros
constexpr int kChunk = 64;  // columns of k a stage: 128 bytes of every row, one swizzle span
constexpr int kTile = 64;   // the weight's rows (output columns) a block: wgmma's n
constexpr int kStages = 12;
constexpr int kWarps = 4;  // the warp group that multiplies; warp 4 copies
constexpr int kThreads = (kWarps + 1) * 32;
constexpr int kTileBytes = kTile * kChunk * 2, kXBytes = kRows * kChunk * 2;
constexpr int kStageBytes = kTileBytes + kXBytes;           // a multiple of 1,024, as the swizzle wants
constexpr int kSharedBytes = kStages * kStageBytes + 1024;  // + the alignment of the first stage

__global__ void __launch_bounds__(kThreads)
    split_product(const __grid_constant__ CUtensorMap x_map,
                  const __grid_constant__ CUtensorMap weight_map, float* __restrict__ parts, int rows,
                  int n, int chunks) {
  extern __shared__ unsigned char raw[];
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages];
  const uint32_t base = (shared_address(raw) + 1023) & ~1023u;
  const int slice = blockIdx.y, first = blockIdx.x * kTile;
  const int begin = (int)((int64_t)slice * chunks / gridDim.y);
  const int steps = (int)((int64_t)(slice + 1) * chunks / gridDim.y) - begin;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  init_stages<kStages>(full, empty, kWarps);

  if (warp == kWarps) {  // the copies
    if (lane == 0) {
      // Step i's weight tile and x's columns into the stage of its slot: the first stages' weights
      // before the wait (no kernel writes them), x after it (see above).
      const auto copy_weight = [&](int i, uint32_t stage, uint32_t bar) {
        copy_tile(stage, &weight_map, (begin + i) * kChunk, first, bar);
      };
      const auto copy_x = [&](int i, uint32_t stage, uint32_t bar) {
        copy_tile(stage + kTileBytes, &x_map, (begin + i) * kChunk, 0, bar);
      };
      copy_stages<kStages>(steps, full, empty, base, kStageBytes, kStageBytes, copy_weight,
                           copy_x);
    }
    return;
  }

  float acc[kTile / 2];
#pragma unroll
  for (int j = 0; j < kTile / 2; ++j) acc[j] = 0.f;
  fence_operands(acc);
  multiply_stages<kStages>(acc, steps, full, empty, base, kStageBytes, lane, [&](uint32_t stage) {
#pragma unroll
    for (int k = 0; k < kChunk / 16; ++k) {  // 16 columns (32 bytes) an instruction
      mma_64x64(acc, descriptor(stage + kTileBytes + 32 * k), descriptor(stage + 32 * k), 1);
    }
  });

  // The parts' memory may be what the kernel before this one still read (the allocator reuses it in
  // stream order): written only after that kernel has ended. The kernel after this one (the norm that
  // sums the parts, or the rotation) may then start, and waits for this one before reading them.
  wait_prerequisites();
  allow_dependents();
  // acc[4 j .. 4 j + 3]: token t's columns 8 j + 2 (lane % 4) and the next, then token t + 8's, with
  // t = 16 warp + lane / 4.
  float* out = parts + (int64_t)slice * rows * n + first + 2 * (lane % 4);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int t = warp * 16 + lane / 4 + 8 * h;
    if (t >= rows) continue;
#pragma unroll
    for (int j = 0; j < kTile / 8; ++j) {
      *reinterpret_cast<float2*>(out + (int64_t)t * n + 8 * j) =
          make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
    }
  }
}

}  // namespace

extern "C" {

// parts (splits, rows, n), contiguous f32: part s = x[:, slice s] @ weight[:, slice s]^T for x (rows,
// k) with rows `x_row` elements apart and weight (n, k) contiguous, both bf16 on the current device,
// slice s the 64-column chunks of k [s chunks / splits, (s + 1) chunks / splits). kHopperUnsupported
// (nothing launched) unless the device is sm_90 and 1 <= rows <= 64, k and n multiples of 64, 1 <=
// splits <= k / 64, x_row a multiple of 8, x and weight 16-byte aligned, parts 8-byte aligned; else
// the launch's cudaError_t.
int groundrl_launch_split_product(const void* x, int64_t x_row, const void* weight, float* parts,
                                  int64_t rows, int64_t k, int64_t n, int64_t splits, void* stream) {
  int sms = 0;
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(weight) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(parts) % 8 == 0;
  const bool fits = rows >= 1 && rows <= kRows && k % kChunk == 0 && n % kTile == 0 && splits >= 1 &&
                    splits <= k / kChunk && x_row % 8 == 0 && k <= INT32_MAX && n <= INT32_MAX;
  if (!fits || !aligned || !hopper_device(&sms)) return kHopperUnsupported;
  CUtensorMap x_map, weight_map;
  if (!tile_map(&x_map, x, rows, k, x_row, kRows) || !tile_map(&weight_map, weight, n, k, k, kTile)) {
    return kHopperUnsupported;
  }
  cudaError_t e = allow_shared(split_product, kSharedBytes);
  if (e != cudaSuccess) return (int)e;
  e = launch_dependent(split_product, dim3((unsigned)(n / kTile), (unsigned)splits), dim3(kThreads),
                       kSharedBytes, static_cast<cudaStream_t>(stream), x_map, weight_map, parts,
                       (int)rows, (int)n, (int)(k / kChunk));
  return e != cudaSuccess ? (int)e : (int)cudaGetLastError();
}

}
