// How fast one H200 reads the 3B decoder's gate|up weights (22,016 rows of 4,096 bytes, 90 MB) in the
// orders a 64-row matmul can read them, with no arithmetic: each thread block takes a band of rows
// and reads it stage by stage, `chunk` bytes of every row of the band a stage (cuBLAS's decoding
// kernel for this product, nvjet_sm90_tst_168x64_64x7, has one block of 168 rows per SM and reads
// 128 bytes of each row a stage), or the band's rows whole one after another (chunk 4,096). Eight
// copies of the matrix are read in turn, so none is in L2 when read again. Not part of the product.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 read_patterns.cu -o read-patterns
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

constexpr int kRows = 22016;
constexpr int kRowVecs = 4096 / 16;  // 16-byte loads a row
constexpr size_t kBytes = (size_t)kRows * 4096;
constexpr int kCopies = 8;
constexpr int kThreads = 512;

// Block b reads rows [b * band, b * band + band): load L of the block (in time order, the
// block's threads taking consecutive L) is stage L / (rows * per_stage), row (L / per_stage) % rows,
// 16-byte piece L % per_stage of that stage's chunk; eight loads of a thread in flight at once.
__global__ void __launch_bounds__(kThreads) read_bands(const uint4* __restrict__ w, int band,
                                                       int per_stage, unsigned* sink) {
  const int row0 = blockIdx.x * band;
  const int rows = min(band, kRows - row0);
  const int per_row_stage = per_stage, stage_loads = rows * per_row_stage;
  const int total = rows * kRowVecs;
  unsigned acc = 0;
#pragma unroll 8
  for (int l = threadIdx.x; l < total; l += kThreads) {
    const int stage = l / stage_loads, within = l % stage_loads;
    const int row = within / per_row_stage, piece = within % per_row_stage;
    const uint4 v = __ldcs(w + (size_t)(row0 + row) * kRowVecs + stage * per_row_stage + piece);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);
}

// The same band read by the copy engine (TMA) instead of the threads: `cp.async.bulk` copies into
// shared memory, `stages` buffers of `group` rows x `chunk` bytes in flight, each completing on its
// mbarrier; one warp issues the copies, the block waits for each buffer in turn, touches one 16-byte
// piece of it a thread and hands it back. Stage k is row group k / (4096 / chunk), chunk k % (4096 /
// chunk): 168-row groups of 128-byte chunks are cuBLAS's tile order, 8-row groups of whole rows a
// contiguous read.
__device__ __forceinline__ unsigned smem(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}

__global__ void __launch_bounds__(256) copy_bands(const char* __restrict__ w, int band, int group,
                                                  int chunk, int stages, unsigned* sink) {
  extern __shared__ __align__(128) unsigned char buf[];
  __shared__ __align__(8) unsigned long long bars[8];
  const int row0 = blockIdx.x * band, rows = min(band, kRows - row0);
  const int chunks = 4096 / chunk, groups = (rows + group - 1) / group, total = groups * chunks;
  const int stage_bytes = group * chunk;
  if (threadIdx.x == 0) {
    for (int i = 0; i < stages; ++i) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem(&bars[i])));
    }
    asm volatile("fence.mbarrier_init.release.cluster;");
  }
  __syncthreads();
  auto issue = [&](int k) {  // warp 0
    const int slot = k % stages, g = k / chunks, c = k % chunks;
    const int n = min(group, rows - g * group);
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem(&bars[slot])),
                   "r"(n * chunk));
    }
    __syncwarp();
    for (int r = threadIdx.x; r < n; r += 32) {
      const char* src = w + (size_t)(row0 + g * group + r) * 4096 + (size_t)c * chunk;
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
              smem(buf + (size_t)slot * stage_bytes + (size_t)r * chunk)),
          "l"(src), "r"(chunk), "r"(smem(&bars[slot]))
          : "memory");
    }
  };
  if (threadIdx.x < 32) {
    for (int k = 0; k < min(stages, total); ++k) issue(k);
  }
  unsigned acc = 0;
  for (int k = 0; k < total; ++k) {
    const int slot = k % stages;
    const unsigned phase = (k / stages) & 1;
    unsigned done = 0;
    while (!done) {
      asm volatile(
          "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
          : "=r"(done)
          : "r"(smem(&bars[slot])), "r"(phase));
    }
    const int g = k / chunks, n = min(group, rows - g * group);
    if (threadIdx.x * 16 < n * chunk) {
      const uint4 v = *reinterpret_cast<const uint4*>(buf + (size_t)slot * stage_bytes + threadIdx.x * 16);
      acc ^= v.x ^ v.w;
    }
    __syncthreads();
    if (threadIdx.x < 32 && k + stages < total) issue(k + stages);
  }
  if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);
}

int main() {
  char* base = nullptr;
  unsigned* sink = nullptr;
  if (cudaMalloc(&base, kBytes * kCopies) != cudaSuccess || cudaMalloc(&sink, 4) != cudaSuccess) {
    std::printf("allocation failed\n");
    return 1;
  }
  cudaMemset(base, 1, kBytes * kCopies);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  struct Case {
    const char* name;
    int band, chunk;
  } cases[] = {
      {"168-row bands, 128 B a row a stage (cuBLAS's tile)", 168, 128},
      {"168-row bands, 256 B a row a stage", 168, 256},
      {"168-row bands, 512 B a row a stage", 168, 512},
      {"168-row bands, rows whole (contiguous 688 KB)", 168, 4096},
      {"84-row bands (two blocks an SM), 128 B a stage", 84, 128},
      {"84-row bands (two blocks an SM), rows whole", 84, 4096},
      {"42-row bands (four blocks an SM), rows whole", 42, 4096},
      {"21-row bands (eight blocks an SM), rows whole", 21, 4096},
  };
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::printf("%d SMs, %.1f MB a read, %d copies cycled\n", sms, kBytes / 1e6, kCopies);
  std::printf("%-52s %7s %9s %8s\n", "order", "blocks", "us/read", "TB/s");
  for (const Case& c : cases) {
    const int blocks = (kRows + c.band - 1) / c.band;
    const int per_stage = c.chunk / 16;
    const int reps = 40;
    for (int i = 0; i < 8; ++i) {
      read_bands<<<blocks, kThreads>>>((const uint4*)(base + (i % kCopies) * kBytes), c.band, per_stage, sink);
    }
    cudaEventRecord(start);
    for (int i = 0; i < reps; ++i) {
      read_bands<<<blocks, kThreads>>>((const uint4*)(base + (i % kCopies) * kBytes), c.band, per_stage, sink);
    }
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0.f;
    cudaEventElapsedTime(&ms, start, stop);
    const double us = 1000.0 * ms / reps;
    std::printf("%-52s %7d %9.1f %8.2f\n", c.name, blocks, us, kBytes / (us * 1e-6) / 1e12);
  }
  struct Copy {
    const char* name;
    int band, group, chunk, stages;
  } copies[] = {
      {"TMA, 168-row bands, 128 B a row a stage, 8 stages", 168, 168, 128, 8},
      {"TMA, 168-row bands, 256 B a row a stage, 4 stages", 168, 168, 256, 4},
      {"TMA, 168-row bands, rows whole, 8 x 24 KB stages", 168, 6, 4096, 8},
      {"TMA, 84-row bands, rows whole, 4 x 24 KB stages", 84, 6, 4096, 4},
  };
  cudaFuncSetAttribute(copy_bands, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
  for (const Copy& c : copies) {
    const int blocks = (kRows + c.band - 1) / c.band;
    const size_t shared = (size_t)c.group * c.chunk * c.stages;
    const int reps = 40;
    for (int i = 0; i < 8; ++i) {
      copy_bands<<<blocks, 256, shared>>>(base + (i % kCopies) * kBytes, c.band, c.group, c.chunk, c.stages, sink);
    }
    cudaEventRecord(start);
    for (int i = 0; i < reps; ++i) {
      copy_bands<<<blocks, 256, shared>>>(base + (i % kCopies) * kBytes, c.band, c.group, c.chunk, c.stages, sink);
    }
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0.f;
    cudaEventElapsedTime(&ms, start, stop);
    const double us = 1000.0 * ms / reps;
    std::printf("%-52s %7d %9.1f %8.2f\n", c.name, blocks, us, kBytes / (us * 1e-6) / 1e12);
  }
  const cudaError_t e = cudaGetLastError();
  std::printf("%s\n", e == cudaSuccess ? "ok" : cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
