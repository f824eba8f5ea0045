// A matmul for the decoding step's few rows: y (m, n) = x (m, k) @ w (n, k)^T with m <= 64, as a
// shared library that skinny_bench.py times against torch's cuBLAS in the same process.
//
// Each thread block takes a band of BN = 32 * WN weight rows and a share of k (gridDim.x shares, the
// blocks of one band forming a thread-block cluster). Every stage copies 128 bytes (64 k) of each of
// the band's rows and of x's 64 rows into shared memory with 16-byte `cp.async` copies, STAGES
// stages in flight; warp (wn, wk) multiplies its 32 weight rows by all 64 x rows over k16 steps wk,
// wk + WK, ... of each stage with `mma.sync.m16n8k16` (the weights as the 16-row operand). The
// warps' partial sums meet in shared memory, the cluster's blocks add each other's in rank order
// through distributed shared memory (deterministic, nothing written to global memory), and each
// block writes its share of the tokens: + bias, + y when accumulating, rounded to bf16 once.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -Xcompiler -fPIC -shared \
//     skinny.cu -o libskinny.so
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace cg = cooperative_groups;

namespace {

constexpr int kTokens = 64;  // x's rows a launch, those past m read as zeros

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

// 16 bytes from `src` into shared memory, or zeros when `valid` is false (src is then not read).
__device__ __forceinline__ void copy16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void wait_pending() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void load_matrices(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Byte offset of 16-byte piece `piece` of tile row `row`: rows of 128 bytes, the pieces permuted by
// the row's low three bits so that the eight rows one ldmatrix matrix reads fall in eight bank groups.
template <int CHUNK>
__device__ __forceinline__ uint32_t swizzled(int row, int piece) {
  return row * CHUNK * 2 + ((piece ^ (row & 7)) << 4);
}

struct Args {
  const __nv_bfloat16* x;
  int64_t ldx;
  const __nv_bfloat16* w;  // (n, k) contiguous
  __nv_bfloat16* y;
  int64_t ldy;
  const __nv_bfloat16* bias;  // (n,) or null
  int accumulate;             // y += x @ w^T
  int m, n, k;
  int probe;     // bit 0: no mma; bit 1: no x loads; bit 2: x_copies copies of x, one a band
  int x_copies;
};

// Shared memory: the stages, reused after the last one for WK partial tiles of (64, BN + 4) f32
// (the pad of 4 puts the accumulators' eight rows and four token pairs in 32 distinct banks).
template <int WN, int WK, int STAGES, int CHUNK>
constexpr int shared_bytes() {
  constexpr int stages = STAGES * (32 * WN + kTokens) * CHUNK * 2;
  constexpr int partials = WK * kTokens * (32 * WN + 4) * 4;
  return stages > partials ? stages : partials;
}

template <int WN, int WK, int STAGES, int CHUNK>
__global__ void __launch_bounds__(WN* WK * 32) skinny_linear(Args a) {
  constexpr int BN = 32 * WN, THREADS = WN * WK * 32, ROWS = BN + kTokens, kChunk = CHUNK;
  constexpr int kPieces = CHUNK / 8;
  constexpr int STAGE_BYTES = ROWS * CHUNK * 2, PITCH = BN + 4, STEPS = CHUNK / 16 / WK;
  extern __shared__ __align__(128) unsigned char smem[];
  const int splits = gridDim.x, split = blockIdx.x, n0 = blockIdx.y * BN;
  const int chunks = a.k / kChunk;
  const int c0 = split * chunks / splits, count = (split + 1) * chunks / splits - c0;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wn = warp % WN, wk = warp / WN;
  const uint32_t base = shared_address(smem);
  const __nv_bfloat16* x = a.x + ((a.probe & 4) ? (int64_t)(blockIdx.y % a.x_copies) * kTokens * a.ldx : 0);

  auto load = [&](int i) {
    const uint32_t stage = base + (i % STAGES) * STAGE_BYTES;
    const int64_t k0 = (int64_t)(c0 + i) * kChunk;
#pragma unroll
    for (int p = tid; p < ((a.probe & 2) ? BN : ROWS) * kPieces; p += THREADS) {
      const int row = p / kPieces, piece = p % kPieces;
      const __nv_bfloat16* src;
      bool valid;
      if (row < BN) {
        valid = n0 + row < a.n;
        src = a.w + (valid ? (int64_t)(n0 + row) * a.k : 0) + k0 + piece * 8;
      } else {
        valid = row - BN < a.m;
        src = x + (valid ? (int64_t)(row - BN) * a.ldx : 0) + k0 + piece * 8;
      }
      copy16(stage + swizzled<CHUNK>(row, piece), src, valid);
    }
  };

  for (int i = 0; i < STAGES - 1; ++i) {
    if (i < count) load(i);
    commit();
  }
  float acc[2][8][4] = {};
  for (int i = 0; i < count; ++i) {
    wait_pending<STAGES - 2>();
    __syncthreads();
    if (i + STAGES - 1 < count) load(i + STAGES - 1);
    commit();
    const uint32_t stage = base + (i % STAGES) * STAGE_BYTES;
    if (a.probe & 1) continue;
#pragma unroll
    for (int s = 0; s < STEPS; ++s) {
      const int kk = wk * STEPS + s;
      uint32_t w_frag[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        load_matrices(w_frag[mt], stage + swizzled<CHUNK>(wn * 32 + mt * 16 + (lane & 15), kk * 2 + (lane >> 4)));
      }
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t x_frag[4];
        const int token = np * 16 + (lane & 7) + ((lane >> 4) << 3);
        load_matrices(x_frag, stage + swizzled<CHUNK>(BN + token, kk * 2 + ((lane >> 3) & 1)));
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          mma(acc[mt][2 * np], w_frag[mt], x_frag[0], x_frag[1]);
          mma(acc[mt][2 * np + 1], w_frag[mt], x_frag[2], x_frag[3]);
        }
      }
    }
  }
  wait_pending<0>();
  __syncthreads();

  // Warp group wk's sums into partial tile wk, (token, band row) f32.
  float* tiles = reinterpret_cast<float*>(smem);
  float* mine = tiles + wk * kTokens * PITCH;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int r = wn * 32 + mt * 16 + lane / 4, t = nt * 8 + (lane % 4) * 2;
      mine[t * PITCH + r] = acc[mt][nt][0];
      mine[(t + 1) * PITCH + r] = acc[mt][nt][1];
      mine[t * PITCH + r + 8] = acc[mt][nt][2];
      mine[(t + 1) * PITCH + r + 8] = acc[mt][nt][3];
    }
  }
  __syncthreads();
  if (WK > 1) {
    for (int e = tid; e < kTokens * BN; e += THREADS) {
      const int at = (e / BN) * PITCH + e % BN;
      float sum = tiles[at];
#pragma unroll
      for (int g = 1; g < WK; ++g) sum += tiles[g * kTokens * PITCH + at];
      tiles[at] = sum;
    }
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();

  // This block's share of the tokens, summed over the cluster's blocks in rank order.
  const int t0 = split * kTokens / splits, t1 = min((split + 1) * kTokens / splits, a.m);
  for (int e = t0 * BN + tid; e < t1 * BN; e += THREADS) {
    const int t = e / BN, r = e % BN;
    if (n0 + r >= a.n) continue;
    float sum = 0.f;
    for (int s = 0; s < splits; ++s) sum += cluster.map_shared_rank(tiles, s)[t * PITCH + r];
    if (a.bias) sum += __bfloat162float(a.bias[n0 + r]);
    __nv_bfloat16* out = a.y + (int64_t)t * a.ldy + n0 + r;
    if (a.accumulate) sum += __bfloat162float(*out);
    *out = __float2bfloat16_rn(sum);
  }
  cluster.sync();
}

template <int WN, int WK, int STAGES, int CHUNK>
cudaError_t launch(const Args& a, int splits, cudaStream_t stream, int* occupancy) {
  constexpr int bytes = shared_bytes<WN, WK, STAGES, CHUNK>();
  auto kernel = skinny_linear<WN, WK, STAGES, CHUNK>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess) {
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  }
  if (e == cudaSuccess && occupancy) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(occupancy, kernel, WN * WK * 32, bytes);
  }
  if (e == cudaSuccess && splits > 8) {
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  }
  if (e != cudaSuccess) return e;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3((unsigned)splits, (unsigned)((a.n + 32 * WN - 1) / (32 * WN)));
  config.blockDim = dim3(WN * WK * 32);
  config.dynamicSmemBytes = bytes;
  config.stream = stream;
  cudaLaunchAttribute cluster = {};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = (unsigned)splits;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, a);
}

}  // namespace

extern "C" {

// The shapes this library was built with: (WN, WK, STAGES) of variant 0, 1, ...
int skinny_linear_launch(int variant, const void* x, int64_t ldx, const void* w, void* y, int64_t ldy,
                         const void* bias, int accumulate, int m, int n, int k, int splits,
                         int probe, int x_copies, int* occupancy, void* stream) {
  if (m < 1 || m > kTokens || k % 128 != 0 || splits < 1 || splits > 16 || splits > k / 128) {
    return -1;
  }
  const Args a = {static_cast<const __nv_bfloat16*>(x), ldx, static_cast<const __nv_bfloat16*>(w),
                  static_cast<__nv_bfloat16*>(y), ldy, static_cast<const __nv_bfloat16*>(bias),
                  accumulate, m, n, k, probe, x_copies};
  auto s = static_cast<cudaStream_t>(stream);
  cudaError_t e;
  switch (variant) {
    case 0: e = launch<4, 1, 4, 64>(a, splits, s, occupancy); break;  // BN 128, 128 threads, 96 KB
    case 1: e = launch<4, 2, 4, 64>(a, splits, s, occupancy); break;  // BN 128, 256 threads, 96 KB
    case 2: e = launch<2, 2, 4, 64>(a, splits, s, occupancy); break;  // BN 64, 128 threads, 64 KB
    case 3: e = launch<2, 2, 3, 128>(a, splits, s, occupancy); break;  // BN 64, 128 thr, 96 KB
    case 4: e = launch<4, 2, 3, 128>(a, splits, s, occupancy); break;  // BN 128, 256 thr, 144 KB
    case 5: e = launch<2, 4, 4, 64>(a, splits, s, occupancy); break;  // BN 64, 256 thr, 64 KB
    case 6: e = launch<2, 4, 3, 128>(a, splits, s, occupancy); break;  // BN 64, 256 thr, 96 KB
    case 7: e = launch<1, 4, 4, 64>(a, splits, s, occupancy); break;  // BN 32, 128 thr, 48 KB
    default: return -1;
  }
  return e == cudaSuccess ? 0 : (int)e;
}

}
