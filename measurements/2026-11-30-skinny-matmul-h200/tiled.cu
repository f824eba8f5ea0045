// The decoding step's few-row matmul y (m, n) = x (m, k) @ w (n, k)^T, m <= 64, reading the weights
// from a tiled copy so that every stage's weights are one contiguous block: w_tiled holds, for band b
// (BN = 16 * TILES rows) and k-chunk c (64 columns), the (BN, 64) tile at ((b * chunks + c) * BN * 64),
// each row's eight 16-byte pieces permuted by the row's low three bits (piece p at p ^ (row & 7)),
// which is the shared-memory layout the tensor-core reads want. A shared library that
// tiled_bench.py times against torch's cuBLAS in the same process.
//
// One warp copies: a stage is one `cp.async.bulk` of the weight tile (BN x 128 bytes, contiguous)
// and one `cp.async.bulk.tensor.2d` of x's 64 rows x 64 columns (a tensor map, 128-byte swizzle, rows
// past m read as zeros), completing on the stage's `full` mbarrier; STAGES stages in flight. The
// other warps multiply (two 16-row weight tiles each, `mma.sync.m16n8k16`, all 64 x rows) and free
// the stage on its `empty` mbarrier. Blocks sharing a band over k (gridDim.x of them, a thread-block
// cluster) add their partial sums through distributed shared memory in rank order; each writes its
// share of the tokens, + bias, + y when accumulating, rounded to bf16 once.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -Xcompiler -fPIC -shared \
//     tiled.cu -o libtiled.so
#include <cooperative_groups.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace cg = cooperative_groups;

namespace {

constexpr int kTokens = 64;  // x's rows a launch, those past m read as zeros
constexpr int kChunk = 64;   // k a stage: 128 bytes of every row
constexpr int kMaxSplits = 16;

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return (uint32_t)__cvta_generic_to_shared(p);
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

__device__ __forceinline__ void copy_bulk(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void copy_tile(uint32_t dst, const CUtensorMap* map, int col, int row,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3}], [%4];\n" ::"r"(dst),
      "l"(map), "r"(col), "r"(row), "r"(bar)
      : "memory");
}

// Byte offset of 16-byte piece `piece` of tile row `row` (rows of 128 bytes, 128-byte swizzle).
__device__ __forceinline__ uint32_t swizzled(int row, int piece) {
  return row * 128 + ((piece ^ (row & 7)) << 4);
}

struct Args {
  const __nv_bfloat16* w_tiled;
  __nv_bfloat16* y;
  int64_t ldy;
  const __nv_bfloat16* bias;  // (n,) or null
  int accumulate;             // y += x @ w^T
  int m, n, k;
  int probe;   // bit 0: no tensor-core work; bit 1: no copies; bit 2: weights in 2 KB copies
};

template <int TILES, int STAGES>
constexpr int shared_bytes() {
  constexpr int stages = STAGES * (16 * TILES + kTokens) * 128;
  constexpr int partials = kTokens * (16 * TILES + 4) * 4;
  return (stages > partials ? stages : partials) + 1024;  // + alignment of the swizzled tiles
}

template <int TILES, int STAGES>
__global__ void __launch_bounds__(((TILES + 1) / 2 + 1) * 32, 1)
    tiled_linear(const __grid_constant__ CUtensorMap x_map, Args a) {
  constexpr int BN = 16 * TILES, WARPS = (TILES + 1) / 2, THREADS = (WARPS + 1) * 32;
  constexpr int W_BYTES = BN * 128, STAGE_BYTES = W_BYTES + kTokens * 128, PITCH = BN + 4;
  extern __shared__ unsigned char raw[];
  __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
  unsigned char* smem = raw + ((1024 - shared_address(raw) % 1024) % 1024);
  const uint32_t base = shared_address(smem);
  const int splits = gridDim.x, split = blockIdx.x, band = blockIdx.y, n0 = band * BN;
  const int chunks = a.k / kChunk;
  const int c0 = split * chunks / splits, count = (split + 1) * chunks / splits - c0;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      barrier_init(shared_address(&full[s]), 1);
      barrier_init(shared_address(&empty[s]), WARPS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  float acc[2][8][4] = {};
  if (warp == WARPS) {
    const __nv_bfloat16* w = a.w_tiled + ((int64_t)band * chunks + c0) * BN * kChunk;
    for (int i = 0; i < count; ++i) {
      const int slot = i % STAGES;
      if (i >= STAGES) barrier_wait(shared_address(&empty[slot]), ((i / STAGES) - 1) & 1);
      const uint32_t bar = shared_address(&full[slot]), stage = base + slot * STAGE_BYTES;
      if (a.probe & 2) {
        if (lane == 0) barrier_arrive(bar);
        continue;
      }
      if (lane == 0) expect_bytes(bar, STAGE_BYTES);
      __syncwarp();
      const char* src = reinterpret_cast<const char*>(w + (int64_t)i * BN * kChunk);
      if (a.probe & 4) {
        for (int piece = lane; piece < W_BYTES / 2048; piece += 32) {
          copy_bulk(stage + piece * 2048, src + piece * 2048, 2048, bar);
        }
      } else if (lane == 0) {
        copy_bulk(stage, src, W_BYTES, bar);
      }
      if (lane == 0) copy_tile(stage + W_BYTES, &x_map, (c0 + i) * kChunk, 0, bar);
    }
  } else {
    for (int i = 0; i < count; ++i) {
      const int slot = i % STAGES;
      barrier_wait(shared_address(&full[slot]), (i / STAGES) & 1);
      const uint32_t stage = base + slot * STAGE_BYTES;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        if (a.probe & 1) break;
        uint32_t w_frag[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          if (warp * 2 + mt < TILES) {
            load_matrices(w_frag[mt],
                          stage + swizzled(warp * 32 + mt * 16 + (lane & 15), kk * 2 + (lane >> 4)));
          }
        }
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t x_frag[4];
          const int token = np * 16 + (lane & 7) + ((lane >> 4) << 3);
          load_matrices(x_frag, stage + W_BYTES + swizzled(token, kk * 2 + ((lane >> 3) & 1)));
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
            if (warp * 2 + mt < TILES) {
              mma(acc[mt][2 * np], w_frag[mt], x_frag[0], x_frag[1]);
              mma(acc[mt][2 * np + 1], w_frag[mt], x_frag[2], x_frag[3]);
            }
          }
        }
      }
      __syncwarp();
      if (lane == 0) barrier_arrive(shared_address(&empty[slot]));
    }
  }
  __syncthreads();  // every stage consumed: the stages' memory holds the partial tile from here

  // This block's sums as a (token, band row) f32 tile.
  float* tile = reinterpret_cast<float*>(smem);
  if (warp < WARPS) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      if (warp * 2 + mt >= TILES) continue;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const int r = warp * 32 + mt * 16 + lane / 4, t = nt * 8 + (lane % 4) * 2;
        tile[t * PITCH + r] = acc[mt][nt][0];
        tile[(t + 1) * PITCH + r] = acc[mt][nt][1];
        tile[t * PITCH + r + 8] = acc[mt][nt][2];
        tile[(t + 1) * PITCH + r + 8] = acc[mt][nt][3];
      }
    }
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();

  // This block's share of the tokens, four rows a thread, summed over the cluster in rank order.
  const int t0 = split * kTokens / splits, t1 = min((split + 1) * kTokens / splits, a.m);
  for (int e = t0 * (BN / 4) + tid; e < t1 * (BN / 4); e += THREADS) {
    const int t = e / (BN / 4), r = (e % (BN / 4)) * 4;
    float4 part[kMaxSplits];
#pragma unroll
    for (int s = 0; s < kMaxSplits; ++s) {
      if (s < splits) {
        part[s] = *reinterpret_cast<const float4*>(cluster.map_shared_rank(tile, s) + t * PITCH + r);
      }
    }
    float sum[4] = {part[0].x, part[0].y, part[0].z, part[0].w};
#pragma unroll
    for (int s = 1; s < kMaxSplits; ++s) {
      if (s < splits) {
        sum[0] += part[s].x;
        sum[1] += part[s].y;
        sum[2] += part[s].z;
        sum[3] += part[s].w;
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int row = n0 + r + j;
      if (row >= a.n) continue;
      float v = sum[j];
      if (a.bias) v += __bfloat162float(a.bias[row]);
      __nv_bfloat16* out = a.y + (int64_t)t * a.ldy + row;
      if (a.accumulate) v += __bfloat162float(*out);
      *out = __float2bfloat16_rn(v);
    }
  }
  cluster.sync();
}

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  if (!fn) {
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&fn),
                                         12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      fn = nullptr;
    }
  }
  return fn;
}

template <int TILES, int STAGES>
int launch(const void* x, int64_t ldx, const Args& a, int splits, cudaStream_t stream) {
  auto encode = encoder();
  if (!encode) return -2;
  CUtensorMap map;
  const cuuint64_t dims[2] = {(cuuint64_t)a.k, (cuuint64_t)a.m};
  const cuuint64_t strides[1] = {(cuuint64_t)ldx * 2};
  const cuuint32_t box[2] = {kChunk, kTokens}, unit[2] = {1, 1};
  if (encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(x), dims, strides, box,
             unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
    return -3;
  }
  constexpr int bytes = shared_bytes<TILES, STAGES>();
  auto kernel = tiled_linear<TILES, STAGES>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess && splits > 8) {
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  }
  if (e != cudaSuccess) return (int)e;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3((unsigned)splits, (unsigned)((a.n + 16 * TILES - 1) / (16 * TILES)));
  config.blockDim = dim3(((TILES + 1) / 2 + 1) * 32);
  config.dynamicSmemBytes = bytes;
  config.stream = stream;
  cudaLaunchAttribute cluster = {};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = (unsigned)splits;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  return (int)cudaLaunchKernelEx(&config, kernel, map, a);
}

}  // namespace

extern "C" {

// The band rows of variant v (the tiling the weights must have).
int tiled_band_rows(int variant) {
  switch (variant) {
    case 0: return 176;
    case 1: return 128;
    case 2: return 64;
    case 3: return 128;
    case 4: return 192;
    case 5: return 128;
    case 6: return 64;
    default: return -1;
  }
}

int tiled_linear_launch(int variant, const void* x, int64_t ldx, const void* w_tiled, void* y,
                        int64_t ldy, const void* bias, int accumulate, int m, int n, int k,
                        int splits, int probe, void* stream) {
  if (m < 1 || m > kTokens || k % kChunk != 0 || splits < 1 || splits > kMaxSplits ||
      splits > k / kChunk || ldx % 8 != 0) {
    return -1;
  }
  const Args a = {static_cast<const __nv_bfloat16*>(w_tiled), static_cast<__nv_bfloat16*>(y), ldy,
                  static_cast<const __nv_bfloat16*>(bias), accumulate, m, n, k, probe};
  auto s = static_cast<cudaStream_t>(stream);
  switch (variant) {
    case 0: return launch<11, 7>(x, ldx, a, splits, s);  // 6 + 1 warps, 210 KB
    case 1: return launch<8, 7>(x, ldx, a, splits, s);   // 4 + 1 warps, 168 KB
    case 2: return launch<4, 8>(x, ldx, a, splits, s);   // 2 + 1 warps, 128 KB
    case 3: return launch<8, 4>(x, ldx, a, splits, s);   // 4 + 1 warps, 96 KB (two blocks an SM)
    case 4: return launch<12, 6>(x, ldx, a, splits, s);  // 6 + 1 warps, 192 KB
    case 5: return launch<8, 2>(x, ldx, a, splits, s);   // 4 + 1 warps, 48 KB (four blocks an SM)
    case 6: return launch<4, 4>(x, ldx, a, splits, s);   // 2 + 1 warps, 64 KB (three blocks an SM)
    default: return -1;
  }
}

}
