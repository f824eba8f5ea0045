// How fast the decoding step's gate|up kernel (crates/groundrl-tensor/csrc/gate_up_swiglu.cu) could
// stream its weights if they were laid out for it: the kernel's own copies without its products, one
// block a band of 88 gate and 88 up rows, four stages of 64 columns in flight, (a) from the
// row-major (2 x 11,008, 2,048) matrix as the kernel reads it (two 2-D tiles of 88 rows x 128 bytes
// a stage, rows 4,096 bytes apart) and (b) from a copy tiled so that a stage's 176 x 64 tile is
// 22.5 KB of contiguous memory (one 2-D tile a stage); both with x's 64 x 64 tile a stage, as the
// kernel copies it. The kernel itself over the same weights, and variants of it that differ in one
// thing each: no output stored; each stage's buffer handed back as soon as its products are issued
// (not after they finish: a race, timing only); two warp groups taking every other stage (each
// storing its own sums: timing only). Eight copies of the weights cycled, so none is in L2 when read
// again; an epilogue dividing by __fdividef, and one dividing exactly without a branch. Not part of
// the product. The kernel's source is included, so the variants use its
// products and SwiGLU.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I crates/groundrl-tensor/csrc \
//     measurements/2026-12-02-gate-up-layout-h200/tile_layouts.cu -o .device/tile-layouts \
//     -L.cache/cuda-toolkit-13.0/lib
#include <algorithm>
#include <cstdio>
#include <vector>

#include "gate_up_swiglu.cu"

constexpr int kInter = 11008, kHidden = 2048;
constexpr int kBands = (kInter + kHalf - 1) / kHalf, kChunks = kHidden / kChunk;
constexpr int kShared = kSharedBytes;
constexpr int kCopies = 8;

__global__ void __launch_bounds__(160, 1)
    copies_only(const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap gate_map,
                const __grid_constant__ CUtensorMap up_map, const __grid_constant__ CUtensorMap tiled_map,
                int tiled, unsigned* sink) {
  extern __shared__ unsigned char raw[];
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages];
  const uint32_t base = (shared_address(raw) + 1023) & ~1023u;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, first = blockIdx.x * kHalf;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(shared_address(&full[s]), 1);
      barrier_init(shared_address(&empty[s]), 4);
    }
    fence_barrier_init();
  }
  __syncthreads();
  if (warp == 4) {
    if (lane == 0) {
      for (int i = 0; i < kChunks; ++i) {
        const int slot = i % kStages;
        if (i >= kStages) barrier_wait(shared_address(&empty[slot]), (i / kStages - 1) & 1);
        const uint32_t stage = base + slot * kStageBytes, bar = shared_address(&full[slot]);
        expect_bytes(bar, kStageBytes);
        if (tiled) {
          copy_tile(stage, &tiled_map, 0, (blockIdx.x * kChunks + i) * 2 * kHalf, bar);
        } else {
          copy_tile(stage, &gate_map, i * kChunk, first, bar);
          copy_tile(stage + kHalfBytes, &up_map, i * kChunk, first, bar);
        }
        copy_tile(stage + 2 * kHalfBytes, &x_map, i * kChunk, 0, bar);
      }
    }
    return;
  }
  unsigned acc = 0;
  for (int i = 0; i < kChunks; ++i) {
    const int slot = i % kStages;
    barrier_wait(shared_address(&full[slot]), (i / kStages) & 1);
    acc ^= reinterpret_cast<const unsigned*>(raw + (base - shared_address(raw)) + slot * kStageBytes)[threadIdx.x];
    __syncwarp();
    if (lane == 0) barrier_arrive(shared_address(&empty[slot]));
  }
  if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);
}

enum Variant { kNoStore = 1, kEarlyRelease = 2, kTwoGroups = 4, kApproxDiv = 8, kBranchFree = 16 };

__device__ __forceinline__ float rcp_approx(float b) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(b));
  return y;
}

// a / b by the fast path of CUDA's correctly rounded division (approximate reciprocal, one Newton
// step, the quotient corrected by its remainder), with no branch: for the operands silu divides by,
// checked against `/` over every bf16 input in main().
__device__ __forceinline__ float divide_fast(float a, float b) {
  float y = rcp_approx(b);
  y = fmaf(y, fmaf(-b, y, 1.0f), y);
  const float q = a * y;
  return fmaf(fmaf(-b, q, a), y, q);
}

// silu(g) * up as swiglu() rounds them, the division by `V`'s method.
template <int V>
__device__ __forceinline__ bf16 swiglu_v(float gate, float up) {
  const float g = rounded(gate);
  const float d = 1.0f + expf(-g);
  const float s = V & kApproxDiv ? __fdividef(g, d) : V & kBranchFree ? divide_fast(g, d) : g / d;
  return __float2bfloat16_rn(rounded(s) * rounded(up));
}

// For every bf16 value g (as bits): whether silu by divide_fast rounds to what silu by `/` does.
__global__ void check_division(unsigned* mismatches, unsigned* first) {
  const unsigned bits = blockIdx.x * blockDim.x + threadIdx.x;
  if (bits >= 65536) return;
  const float g = __uint_as_float(bits << 16);
  const float d = 1.0f + expf(-g);
  const float want = rounded(g / d), got = rounded(divide_fast(g, d));
  const bool same = __float_as_uint(want) == __float_as_uint(got) || (want != want && got != got);
  if (!same && g >= -13.5f && g < 0x1p100f) {
    atomicAdd(mismatches, 1u);
    atomicMin(first, bits);
  }
}

// gate_up_swiglu's kernel with the changes `V` names (see the header).
template <int V>
__global__ void __launch_bounds__(V & kTwoGroups ? 288 : 160, 1)
    variant(const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap gate_map,
            const __grid_constant__ CUtensorMap up_map, bf16* __restrict__ out) {
  constexpr int groups = V & kTwoGroups ? 2 : 1;
  extern __shared__ unsigned char raw[];
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages];
  const uint32_t base = (shared_address(raw) + 1023) & ~1023u;
  const int first = blockIdx.x * kHalf;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(shared_address(&full[s]), 1);
      barrier_init(shared_address(&empty[s]), kWarps);
    }
    fence_barrier_init();
  }
  __syncthreads();
  if (warp == groups * kWarps) {
    if (lane == 0) {
      for (int i = 0; i < kChunks; ++i) {
        const int slot = i % kStages;
        if (i >= kStages) barrier_wait(shared_address(&empty[slot]), (i / kStages - 1) & 1);
        const uint32_t stage = base + slot * kStageBytes, bar = shared_address(&full[slot]);
        expect_bytes(bar, kStageBytes);
        copy_tile(stage, &gate_map, i * kChunk, first, bar);
        copy_tile(stage + kHalfBytes, &up_map, i * kChunk, first, bar);
        copy_tile(stage + 2 * kHalfBytes, &x_map, i * kChunk, 0, bar);
      }
    }
    return;
  }
  const int group = warp / kWarps, gwarp = warp % kWarps;
  float acc[kBand / 2];
#pragma unroll
  for (int j = 0; j < kBand / 2; ++j) acc[j] = 0.f;
  fence_operands(acc);
  int previous = -1;
  for (int i = group; i < kChunks; i += groups) {
    const int slot = i % kStages;
    barrier_wait(shared_address(&full[slot]), (i / kStages) & 1);
    const uint32_t stage = base + slot * kStageBytes;
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < kChunk / 16; ++k) {
      mma_176(acc, descriptor(stage + 2 * kHalfBytes + 32 * k), descriptor(stage + 32 * k));
    }
    wgmma_commit();
    if (V & kEarlyRelease) {
      if (lane == 0) barrier_arrive(shared_address(&empty[slot]));
    } else {
      wgmma_wait<1>();
      fence_operands(acc);
      if (previous >= 0 && lane == 0) barrier_arrive(shared_address(&empty[previous % kStages]));
      previous = i;
    }
  }
  wgmma_wait<0>();
  fence_operands(acc);
  if (V & kNoStore) {
    if (acc[0] == 1.2345f) out[threadIdx.x] = __float2bfloat16_rn(acc[1]);
    return;
  }
  const int column = first + 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < kHalf / 8; ++j) {
    const int c = column + 8 * j;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int t = gwarp * 16 + lane / 4 + 8 * h;
      if (c >= kInter) continue;
      const bf16 lo = swiglu_v<V>(acc[4 * j + 2 * h], acc[4 * (j + kHalf / 8) + 2 * h]);
      const bf16 hi = swiglu_v<V>(acc[4 * j + 2 * h + 1], acc[4 * (j + kHalf / 8) + 2 * h + 1]);
      *reinterpret_cast<__nv_bfloat162*>(out + (int64_t)t * kInter + c) = __halves2bfloat162(lo, hi);
    }
  }
}

// p[i] uniform in [-scale, scale) from a hash of i and `seed`, so that the products' values (and the
// epilogue's branches) are those of real data, not of zeros.
__global__ void fill(bf16* p, size_t n, float scale, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2bfloat16_rn(scale * ((h & 0xffffff) / 8388608.0f - 1.0f));
  }
}

// A tensor map over `rows` x 64 bf16 (rows 128 bytes apart) read in (box_rows, 64) tiles.
static bool narrow_map(CUtensorMap* map, const void* data, int64_t rows, int box_rows) {
  return tile_map(map, data, rows, kChunk, kChunk, box_rows);
}

int main() {
  const size_t weight_bytes = (size_t)2 * kInter * kHidden * 2;
  const size_t tiled_rows = (size_t)kBands * kChunks * 2 * kHalf;
  std::vector<void*> plain(kCopies), tiled(kCopies);
  for (int c = 0; c < kCopies; ++c) {
    cudaMalloc(&plain[c], weight_bytes);
    cudaMalloc(&tiled[c], tiled_rows * kChunk * 2);
    fill<<<1024, 256>>>(static_cast<bf16*>(plain[c]), weight_bytes / 2, 0.05f, 17 + c);
    cudaMemset(tiled[c], 0x11, tiled_rows * kChunk * 2);
  }
  void *x, *out;
  unsigned* sink;
  cudaMalloc(&x, kRows * kHidden * 2);
  fill<<<64, 256>>>(static_cast<bf16*>(x), kRows * kHidden, 1.0f, 5);
  cudaMalloc(&out, kRows * kInter * 2);
  cudaMalloc(&sink, 4);
  std::vector<CUtensorMap> gate(kCopies), up(kCopies), tile(kCopies);
  CUtensorMap x_map;
  tile_map(&x_map, x, kRows, kHidden, kHidden, kRows);
  for (int c = 0; c < kCopies; ++c) {
    const auto* w = static_cast<const bf16*>(plain[c]);
    if (!tile_map(&gate[c], w, kInter, kHidden, kHidden, kHalf) ||
        !tile_map(&up[c], w + (size_t)kInter * kHidden, kInter, kHidden, kHidden, kHalf) ||
        !narrow_map(&tile[c], tiled[c], tiled_rows, 2 * kHalf)) {
      printf("tensor map failed\n");
      return 1;
    }
  }
  cudaFuncSetAttribute(copies_only, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared);
  cudaFuncSetAttribute(variant<kNoStore>, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared);
  cudaFuncSetAttribute(variant<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared);
  cudaFuncSetAttribute(variant<kEarlyRelease>, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared);
  cudaFuncSetAttribute(variant<kTwoGroups>, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared);
  cudaFuncSetAttribute(variant<kApproxDiv>, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared);
  cudaFuncSetAttribute(variant<kBranchFree>, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared);
  {
    unsigned* counts;
    cudaMalloc(&counts, 8);
    const unsigned init[2] = {0, 0xffffffffu};
    cudaMemcpy(counts, init, 8, cudaMemcpyHostToDevice);
    check_division<<<256, 256>>>(counts, counts + 1);
    unsigned got[2];
    cudaMemcpy(got, counts, 8, cudaMemcpyDeviceToHost);
    printf("silu's division without a branch against `/`, every bf16 input from -13.5 up: %u differ (first bits %#x)\n",
           got[0], got[1]);
  }
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  const int reps = 64;
  auto time = [&](const char* name, auto launch) {
    std::vector<float> runs;
    for (int round = 0; round < 5; ++round) {
      for (int i = 0; i < kCopies; ++i) launch(i);
      cudaEventRecord(start);
      for (int i = 0; i < reps; ++i) launch(i % kCopies);
      cudaEventRecord(stop);
      cudaEventSynchronize(stop);
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      runs.push_back(ms * 1000 / reps);
    }
    std::sort(runs.begin(), runs.end());
    const cudaError_t e = cudaGetLastError();
    printf("%-46s median %6.2f us, best %6.2f us, %.2f TB/s of weights (median)%s%s\n", name, runs[2], runs[0],
           weight_bytes / runs[2] / 1e6, e == cudaSuccess ? "" : "  error: ",
           e == cudaSuccess ? "" : cudaGetErrorString(e));
  };
  for (int pass = 0; pass < 2; ++pass) {
    time("copies only, row-major (2 tiles of 88 x 64)", [&](int c) {
      copies_only<<<kBands, 160, kShared>>>(x_map, gate[c], up[c], tile[c], 0, sink);
    });
    time("copies only, tiled (1 tile of 176 x 64)", [&](int c) {
      copies_only<<<kBands, 160, kShared>>>(x_map, gate[c], up[c], tile[c], 1, sink);
    });
    time("gate_up_swiglu kernel, row-major", [&](int c) {
      groundrl_launch_gate_up_swiglu(x, kHidden, plain[c], out, kRows, kHidden, kInter, nullptr);
    });
    time("variant: as the kernel, plain launch", [&](int c) {
      variant<0><<<kBands, 160, kShared>>>(x_map, gate[c], up[c], (bf16*)out);
    });
    time("variant: no output stored", [&](int c) {
      variant<kNoStore><<<kBands, 160, kShared>>>(x_map, gate[c], up[c], (bf16*)out);
    });
    time("variant: buffers handed back at issue", [&](int c) {
      variant<kEarlyRelease><<<kBands, 160, kShared>>>(x_map, gate[c], up[c], (bf16*)out);
    });
    time("variant: approximate division (__fdividef)", [&](int c) {
      variant<kApproxDiv><<<kBands, 160, kShared>>>(x_map, gate[c], up[c], (bf16*)out);
    });
    time("variant: exact division without a branch", [&](int c) {
      variant<kBranchFree><<<kBands, 160, kShared>>>(x_map, gate[c], up[c], (bf16*)out);
    });
    time("variant: two warp groups", [&](int c) {
      variant<kTwoGroups><<<kBands, 288, kShared>>>(x_map, gate[c], up[c], (bf16*)out);
    });
  }
  return 0;
}
