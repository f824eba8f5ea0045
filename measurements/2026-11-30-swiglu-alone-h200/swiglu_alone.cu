// The SwiGLU kernel of csrc/kernels.cu (silu(gate) * up at the 3B decoding step's shape, 64 x 11,008 from
// a 64 x 22,016 gate|up buffer) timed alone: 200 launches captured in a CUDA graph, replayed five
// times, against an empty kernel; one, two or four 8-value pieces a thread. Not part of the product.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 swiglu_alone.cu -o .device/silu-bench -L.cache/cuda-toolkit-13.0/lib
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>
using bf16 = __nv_bfloat16;
__device__ __forceinline__ float f(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ bf16 b(float x) { return __float2bfloat16_rn(x); }
template <class T, int W> struct alignas(W * sizeof(T)) Vec { T v[W]; };

template <int W, int PER>
__global__ void silu_mul(const bf16* __restrict__ gate, int64_t gate_row, const bf16* __restrict__ up,
                         int64_t up_row, bf16* __restrict__ out, int64_t rows, int64_t cols) {
  uint32_t chunks = (uint32_t)(cols / W);
  uint32_t total = rows * chunks;
  uint32_t t0 = (blockIdx.x * blockDim.x) * PER + threadIdx.x;
#pragma unroll
  for (int p = 0; p < PER; ++p) {
    uint32_t t = t0 + p * blockDim.x;
    if (t >= total) return;
    int64_t r = t / chunks, c = (t % chunks) * W;
    auto g = *reinterpret_cast<const Vec<bf16, W>*>(gate + r * gate_row + c);
    auto u = *reinterpret_cast<const Vec<bf16, W>*>(up + r * up_row + c);
    Vec<bf16, W> o;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      float x = f(g.v[k]);
      o.v[k] = b(f(b(x / (1.0f + expf(-x)))) * f(u.v[k]));
    }
    *reinterpret_cast<Vec<bf16, W>*>(out + r * cols + c) = o;
  }
}

__global__ void empty_kernel() {}

int main() {
  const int rows = 64, cols = 11008;
  bf16 *gu, *out;
  cudaMalloc(&gu, (size_t)rows * 2 * cols * 2);
  cudaMalloc(&out, (size_t)rows * cols * 2);
  cudaMemset(gu, 0x3c, (size_t)rows * 2 * cols * 2);
  cudaEvent_t a, z;
  cudaEventCreate(&a);
  cudaEventCreate(&z);
  cudaStream_t s;
  cudaStreamCreate(&s);
  auto time_graph = [&](auto launch, const char* name) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    for (int i = 0; i < 200; ++i) launch();
    cudaStreamEndCapture(s, &g);
    cudaGraphInstantiate(&ge, g, 0);
    cudaGraphLaunch(ge, s);
    cudaEventRecord(a, s);
    for (int i = 0; i < 5; ++i) cudaGraphLaunch(ge, s);
    cudaEventRecord(z, s);
    cudaEventSynchronize(z);
    float ms;
    cudaEventElapsedTime(&ms, a, z);
    std::printf("%-46s %6.2f us a launch in a graph\n", name, ms * 1000 / 1000);
  };
  const int64_t n8 = (int64_t)rows * cols / 8;
  time_graph([&] { empty_kernel<<<1, 32, 0, s>>>(); }, "empty kernel");
  time_graph([&] { silu_mul<8, 1><<<(n8 + 255) / 256, 256, 0, s>>>(gu, 2 * cols, gu + cols, 2 * cols, out, rows, cols); },
             "silu_mul W=8, 1 a thread, 256 threads");
  time_graph([&] { silu_mul<8, 1><<<(n8 + 127) / 128, 128, 0, s>>>(gu, 2 * cols, gu + cols, 2 * cols, out, rows, cols); },
             "silu_mul W=8, 1 a thread, 128 threads");
  time_graph([&] { silu_mul<8, 2><<<(n8 + 511) / 512, 256, 0, s>>>(gu, 2 * cols, gu + cols, 2 * cols, out, rows, cols); },
             "silu_mul W=8, 2 a thread, 256 threads");
  time_graph([&] { silu_mul<8, 4><<<(n8 + 1023) / 1024, 256, 0, s>>>(gu, 2 * cols, gu + cols, 2 * cols, out, rows, cols); },
             "silu_mul W=8, 4 a thread, 256 threads");
  std::printf("%s\n", cudaGetErrorString(cudaGetLastError()));
}
