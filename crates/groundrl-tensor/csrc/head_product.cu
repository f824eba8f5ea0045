// The decoding step's output head on Hopper GPUs: logits = x W^T in bf16 for up to 64 rows of x and a
// vocabulary's weight W (n, k), the step's largest read (622 MB at the 3B shape, a fifth of the
// step's bytes). cuBLAS's product starts once the final norm has ended, after a memset of its own;
// this kernel is launched to start during that norm (dependent_launch.cuh) and copies its first
// stages' weights before waiting for it, when the memory bus is otherwise idle.
//
// One block an SM, each taking the 128-row tiles of W b, b + grid, b + 2 grid, ... (1,187 tiles at
// Qwen's 151,936 words: nine a block on 132 SMs but for one block's eight): its warp group (four
// warps) multiplies x's 64 rows by the tile's 128 rows in 64-column stages (two `wgmma.m64n64k16`
// a 16-column step, one for each half of the tile), rounds the tile's f32 sums to bf16 and stores
// them, while a fifth warp copies the next stages into shared memory with the copy engine (two
// `cp.async.bulk.tensor.2d` copies a stage, weight and x, through tensor maps with the 128-byte
// swizzle, rows past the end read as zeros), eight stages (192 KiB) in flight across the tiles, each
// freed on an mbarrier once its products are done. x (at most 256 KiB) does not fit beside the
// stages, so each stage copies its 64 columns again, from L2. The sums run in another order than
// cuBLAS's; the crate's CUDA test bounds them against the exact products.
//
// Built for sm_90a only (`wgmma`); the launcher answers kHopperUnsupported on other GPUs and shapes, and
// the caller takes cuBLAS's product.

#include "dependent_launch.cuh"
#include "hopper.cuh"

namespace {

using namespace hopper;

constexpr int kRows = 64;    // x's rows a launch (wgmma's m); rows past the count read as zeros
constexpr int kChunk = 64;   // columns of k a stage: 128 bytes of every row, one swizzle span
constexpr int kTile = 128;   // W's rows (output columns) a tile: two products of wgmma's n = 64
constexpr int kHalf = 64;    // the rows of each of the two products
constexpr int kStages = 8;
constexpr int kWarps = 4;  // the warp group that multiplies; warp 4 copies
constexpr int kThreads = (kWarps + 1) * 32;
constexpr int kTileBytes = kTile * kChunk * 2, kXBytes = kRows * kChunk * 2;
constexpr int kStageBytes = kTileBytes + kXBytes;           // a multiple of 1,024, as the swizzle wants
constexpr int kSharedBytes = kStages * kStageBytes + 1024;  // + the alignment of the first stage

// A tile's sums as bf16 into out (rows, n), rows `out_row` apart: acc[h][4 j .. 4 j + 3] hold token
// t's columns 64 h + 8 j + 2 (lane % 4) and the next, then token t + 8's, with t = 16 warp + lane / 4;
// tokens and columns past the end are skipped (n is even).
__device__ __forceinline__ void store_tile(const float (&acc)[2][32], bf16* __restrict__ out,
                                           int64_t out_row, int first, int rows, int n, int warp,
                                           int lane) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = warp * 16 + lane / 4 + 8 * r;
    if (t >= rows) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int j = 0; j < kHalf / 8; ++j) {
        const int c = first + kHalf * h + 8 * j + 2 * (lane % 4);
        if (c >= n) continue;
        *reinterpret_cast<__nv_bfloat162*>(out + t * out_row + c) =
            __floats2bfloat162_rn(acc[h][4 * j + 2 * r], acc[h][4 * j + 2 * r + 1]);
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    head_product(const __grid_constant__ CUtensorMap x_map,
                 const __grid_constant__ CUtensorMap weight_map, bf16* __restrict__ out,
                 int64_t out_row, int rows, int n, int chunks) {
  extern __shared__ unsigned char raw[];
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages];
  const uint32_t base = (shared_address(raw) + 1023) & ~1023u;
  const int tiles = (n + kTile - 1) / kTile;
  const int mine = (tiles - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const auto tile_of = [&](int i) { return (int)blockIdx.x + i * (int)gridDim.x; };
  init_stages<kStages>(full, empty, kWarps);

  if (warp == kWarps) {  // the copies
    if (lane == 0) {
      // Step i (tile i / chunks, chunk i % chunks): its weight tile before the wait for the first
      // stages (no kernel writes W), x's columns after it (the norm before this kernel writes x).
      const auto copy_weight = [&](int i, uint32_t stage, uint32_t bar) {
        copy_tile(stage, &weight_map, (i % chunks) * kChunk, tile_of(i / chunks) * kTile, bar);
      };
      const auto copy_x = [&](int i, uint32_t stage, uint32_t bar) {
        copy_tile(stage + kTileBytes, &x_map, (i % chunks) * kChunk, 0, bar);
      };
      copy_stages<kStages>(mine * chunks, full, empty, base, kStageBytes, copy_weight, copy_x);
    }
    return;
  }

  // The logits' memory is written only once the kernels before this one have ended (the sampler
  // of the step before read it).
  wait_prerequisites();
  for (int i = 0; i < mine; ++i) {
    float acc[2][32];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int j = 0; j < 32; ++j) acc[h][j] = 0.f;
    }
    fence_operands(acc);
    multiply_stages<kStages>(
        acc, chunks, full, empty, base, kStageBytes, lane,
        [&](uint32_t stage) {
#pragma unroll
          for (int k = 0; k < kChunk / 16; ++k) {  // 16 columns (32 bytes) an instruction
            const uint64_t x = descriptor(stage + kTileBytes + 32 * k);
            mma_64x64(acc[0], x, descriptor(stage + 32 * k), 1);
            mma_64x64(acc[1], x, descriptor(stage + kHalf * 128 + 32 * k), 1);
          }
        },
        i * chunks);
    store_tile(acc, out, out_row, tile_of(i) * kTile, rows, n, warp, lane);
  }
}

}  // namespace

extern "C" {

// out (rows, n) bf16, rows `out_row` elements apart = x @ weight^T for x (rows, k) with rows `x_row`
// elements apart and weight (n, k) contiguous, all bf16 on the current device, each sum rounded once.
// kHopperUnsupported (nothing launched) unless the device is sm_90 and 1 <= rows <= 64, k a multiple
// of 64, n even, x_row a multiple of 8, x and weight 16-byte aligned, out 4-byte aligned with out_row
// even; else the launch's cudaError_t.
int groundrl_launch_head_product(const void* x, int64_t x_row, const void* weight, void* out,
                                 int64_t out_row, int64_t rows, int64_t k, int64_t n, void* stream) {
  int sms = 0;
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(weight) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(out) % 4 == 0 && out_row % 2 == 0;
  const bool fits = rows >= 1 && rows <= kRows && k % kChunk == 0 && n % 2 == 0 && x_row % 8 == 0 &&
                    k <= INT32_MAX && n <= INT32_MAX - kTile && out_row >= n;
  if (!fits || !aligned || !hopper_device(&sms)) return kHopperUnsupported;
  CUtensorMap x_map, weight_map;
  if (!tile_map(&x_map, x, rows, k, x_row, kRows) || !tile_map(&weight_map, weight, n, k, k, kTile)) {
    return kHopperUnsupported;
  }
  cudaError_t e = allow_shared(head_product, kSharedBytes);
  if (e != cudaSuccess) return (int)e;
  const int64_t tiles = (n + kTile - 1) / kTile;
  const unsigned blocks = (unsigned)(tiles < sms ? tiles : sms);
  e = launch_dependent(head_product, dim3(blocks), dim3(kThreads), kSharedBytes,
                       static_cast<cudaStream_t>(stream), x_map, weight_map, static_cast<bf16*>(out),
                       out_row, (int)rows, (int)n, (int)(k / kChunk));
  return e != cudaSuccess ? (int)e : (int)cudaGetLastError();
}

}
