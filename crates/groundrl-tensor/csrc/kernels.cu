// CUDA kernels for what libtorch runs as several passes over memory: the rotary embedding (vision
// tower, and decoding with its KV-cache write) and the SwiGLU product silu(gate) * up; and RMSNorm
// (one pass per row instead of libtorch's, see there). The first three compute what transformers'
// Qwen2.5-VL code computes, in its order of operations and roundings, so results equal that
// composition of PyTorch operations bit for bit (checked by the crate's CUDA tests):
// - no contraction into fused multiply-adds (`__fmul_rn`/`__fadd_rn` where the reference rounds a
//   product before adding it);
// - IEEE division and `expf` (no fast math), as ATen's silu.
// bf16 tensors only; the launchers take raw pointers and strides in elements (the C++ shim
// fused.cpp checks the tensors, and that a launch has fewer than 2^31 threads, so thread indices are
// split with 32-bit arithmetic) and return the launch's cudaError_t.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

namespace {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float f(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ bf16 b(float x) { return __float2bfloat16_rn(x); }

// W values of T loaded or stored in one access (W * sizeof(T) bytes, which the launchers check the
// addresses are aligned to).
template <class T, int W>
struct alignas(W * sizeof(T)) Vec {
  T v[W];
};

template <int W, class T>
__device__ __forceinline__ Vec<T, W> load(const T* p) {
  return *reinterpret_cast<const Vec<T, W>*>(p);
}

template <int W, class T>
__device__ __forceinline__ void store(T* p, const Vec<T, W>& x) {
  *reinterpret_cast<Vec<T, W>*>(p) = x;
}

// Whether every address and stride (in elements of `bytes` bytes) is a multiple of `align` bytes.
bool aligned(int64_t align, int64_t bytes, std::initializer_list<const void*> pointers,
             std::initializer_list<int64_t> strides) {
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % align) return false;
  for (int64_t s : strides)
    if ((s * bytes) % align) return false;
  return true;
}

// The vision tower's rotation, in f32 as transformers does (`q.float()`, f32 cos/sin, the sum cast
// back): out[i] = x[i] cos[i] + x[pair(i)] signed_sin[i] over (rows, heads, dim) with dim = 2 half.
// One thread per (row, head, W consecutive i < half) computes those i and the i + half (W = 4 when
// the layout allows 8-byte loads, else 1).
template <int W>
__global__ void vision_rotary(const bf16* __restrict__ x, int64_t x_row, int64_t x_head,
                              const float* __restrict__ cos, const float* __restrict__ ssin,
                              bf16* __restrict__ out, int64_t rows, int64_t heads, int64_t half) {
  uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  uint32_t chunks = (uint32_t)(half / W);
  if (t >= rows * heads * chunks) return;
  int64_t i = (t % chunks) * W, h = (t / chunks) % (uint32_t)heads, r = t / (chunks * (uint32_t)heads);
  const bf16* xs = x + r * x_row + h * x_head;
  const float* c = cos + r * 2 * half;
  const float* s = ssin + r * 2 * half;
  bf16* o = out + (r * heads + h) * 2 * half;
  Vec<bf16, W> lo = load<W>(xs + i), hi = load<W>(xs + i + half), out_lo, out_hi;
  Vec<float, W> c_lo = load<W>(c + i), c_hi = load<W>(c + i + half);
  Vec<float, W> s_lo = load<W>(s + i), s_hi = load<W>(s + i + half);
#pragma unroll
  for (int k = 0; k < W; ++k) {
    float l = f(lo.v[k]), h2 = f(hi.v[k]);
    out_lo.v[k] = b(__fadd_rn(__fmul_rn(l, c_lo.v[k]), __fmul_rn(h2, s_lo.v[k])));
    out_hi.v[k] = b(__fadd_rn(__fmul_rn(h2, c_hi.v[k]), __fmul_rn(l, s_hi.v[k])));
  }
  store<W>(o + i, out_lo);
  store<W>(o + i + half, out_hi);
}

// One decoding step's rotation and cache write. `qkv` (rows, heads + 2 kv_heads, dim) holds every
// row's projected query, key and value heads; tables (rows, dim) are bf16, and every product and the
// sum are rounded to bf16 as transformers' bf16 `q * cos + rotate_half(q) * sin` rounds them. Query
// heads go to `q_out` (rows, heads, dim); key heads, rotated, and value heads, copied, go to column
// `*column` of the caches (rows, kv_heads, capacity, dim). The column is read on the device, so a
// captured CUDA graph replays the step for every column.
__global__ void decode_rotary_write(const bf16* __restrict__ qkv, int64_t qkv_row,
                                    const bf16* __restrict__ cos, const bf16* __restrict__ ssin,
                                    bf16* __restrict__ q_out, bf16* __restrict__ keys,
                                    bf16* __restrict__ values, const int64_t* __restrict__ column,
                                    int64_t rows, int64_t heads, int64_t kv_heads, int64_t capacity,
                                    int64_t half) {
  int64_t all = heads + 2 * kv_heads;
  uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= rows * all * half) return;
  int64_t i = t % (uint32_t)half, h = (t / (uint32_t)half) % (uint32_t)all,
          r = t / (uint32_t)(half * all);
  int64_t dim = 2 * half;
  const bf16* x = qkv + r * qkv_row + h * dim;
  bf16 lo = x[i], hi = x[i + half];
  int64_t cache_row = (r * kv_heads) * capacity + *column;
  if (h >= heads + kv_heads) {
    bf16* o = values + (cache_row + (h - heads - kv_heads) * capacity) * dim;
    o[i] = lo;
    o[i + half] = hi;
    return;
  }
  const bf16* c = cos + r * dim;
  const bf16* s = ssin + r * dim;
  bf16 a_lo = b(f(lo) * f(c[i])), b_lo = b(f(hi) * f(s[i]));
  bf16 a_hi = b(f(hi) * f(c[i + half])), b_hi = b(f(lo) * f(s[i + half]));
  bf16* o = h < heads ? q_out + (r * heads + h) * dim
                      : keys + (cache_row + (h - heads) * capacity) * dim;
  o[i] = b(f(a_lo) + f(b_lo));
  o[i + half] = b(f(a_hi) + f(b_hi));
}

// silu(gate) * up over (rows, cols), each rounded to bf16 as ATen's bf16 silu and mul round them.
// One thread per W consecutive columns (W = 8 when the layout allows 16-byte loads, else 1).
template <int W>
__global__ void silu_mul(const bf16* __restrict__ gate, int64_t gate_row, const bf16* __restrict__ up,
                         int64_t up_row, bf16* __restrict__ out, int64_t rows, int64_t cols) {
  uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  uint32_t chunks = (uint32_t)(cols / W);
  if (t >= rows * chunks) return;
  int64_t r = t / chunks, c = (t % chunks) * W;
  Vec<bf16, W> g = load<W>(gate + r * gate_row + c), u = load<W>(up + r * up_row + c), o;
#pragma unroll
  for (int k = 0; k < W; ++k) {
    float x = f(g.v[k]);
    o.v[k] = b(f(b(x / (1.0f + expf(-x)))) * f(u.v[k]));
  }
  store<W>(out + r * cols + c, o);
}

// RMSNorm as libtorch's bf16 `rms_norm` computes it (layers.rs): in f32, weight * (rsqrt(mean(x^2) +
// eps) * x), rounded once to bf16. Unlike the kernels above it is not bit-exact by construction: its
// sum of squares runs in its own order (threads, warps), so the f32 rsqrt can differ in its last bits
// and a bf16 output by one unit (CUDA test). One block per row of x (rows, hidden), rows strided, one
// thread per 8 values (hidden a multiple of 256, at most 8192): every load of the row in flight at once,
// where a loop over the row would wait for each in turn.
__global__ void rms_norm(const bf16* __restrict__ x, int64_t x_row, const bf16* __restrict__ w,
                         bf16* __restrict__ out, int64_t hidden, float eps) {
  __shared__ float warp_sums[32];
  const int64_t row = blockIdx.x;
  const int c = 8 * threadIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const Vec<bf16, 8> v = load<8>(x + row * x_row + c), g = load<8>(w + c);
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < 8; ++k) sum += f(v.v[k]) * f(v.v[k]);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  sum = lane < (int)(blockDim.x / 32) ? warp_sums[lane] : 0.f;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const float r = rsqrtf(sum / (float)hidden + eps);
  Vec<bf16, 8> o;
#pragma unroll
  for (int k = 0; k < 8; ++k) o.v[k] = b(f(g.v[k]) * (r * f(v.v[k])));
  store<8>(out + row * hidden + c, o);
}

constexpr int kThreads = 256;

unsigned blocks(int64_t threads) { return (unsigned)((threads + kThreads - 1) / kThreads); }

}  // namespace

extern "C" {

int groundrl_launch_vision_rotary(const void* x, int64_t x_row, int64_t x_head, const float* cos,
                                  const float* ssin, void* out, int64_t rows, int64_t heads,
                                  int64_t half, void* stream) {
  auto s = (cudaStream_t)stream;
  if (rows * heads * half == 0) return 0;
  if (half % 4 == 0 && aligned(8, 2, {x, out}, {x_row, x_head, half}) && aligned(16, 4, {cos, ssin}, {half})) {
    vision_rotary<4><<<blocks(rows * heads * half / 4), kThreads, 0, s>>>(
        (const bf16*)x, x_row, x_head, cos, ssin, (bf16*)out, rows, heads, half);
  } else {
    vision_rotary<1><<<blocks(rows * heads * half), kThreads, 0, s>>>(
        (const bf16*)x, x_row, x_head, cos, ssin, (bf16*)out, rows, heads, half);
  }
  return (int)cudaGetLastError();
}

int groundrl_launch_decode_rotary_write(const void* qkv, int64_t qkv_row, const void* cos,
                                        const void* ssin, void* q_out, void* keys, void* values,
                                        const int64_t* column, int64_t rows, int64_t heads,
                                        int64_t kv_heads, int64_t capacity, int64_t half,
                                        void* stream) {
  int64_t n = rows * (heads + 2 * kv_heads) * half;
  if (n == 0) return 0;
  decode_rotary_write<<<blocks(n), kThreads, 0, (cudaStream_t)stream>>>(
      (const bf16*)qkv, qkv_row, (const bf16*)cos, (const bf16*)ssin, (bf16*)q_out, (bf16*)keys,
      (bf16*)values, column, rows, heads, kv_heads, capacity, half);
  return (int)cudaGetLastError();
}

int groundrl_launch_silu_mul(const void* gate, int64_t gate_row, const void* up, int64_t up_row,
                             void* out, int64_t rows, int64_t cols, void* stream) {
  auto s = (cudaStream_t)stream;
  if (rows * cols == 0) return 0;
  if (aligned(16, 2, {gate, up, out}, {gate_row, up_row, cols})) {
    silu_mul<8><<<blocks(rows * cols / 8), kThreads, 0, s>>>(
        (const bf16*)gate, gate_row, (const bf16*)up, up_row, (bf16*)out, rows, cols);
  } else {
    silu_mul<1><<<blocks(rows * cols), kThreads, 0, s>>>(
        (const bf16*)gate, gate_row, (const bf16*)up, up_row, (bf16*)out, rows, cols);
  }
  return (int)cudaGetLastError();
}

int groundrl_launch_rms_norm(const void* x, int64_t x_row, const void* w, void* out, int64_t rows,
                             int64_t hidden, float eps, void* stream) {
  if (rows == 0) return 0;
  if (hidden % 256 || hidden > 8192 || !aligned(16, 2, {x, w, out}, {x_row})) {
    return (int)cudaErrorInvalidValue;
  }
  rms_norm<<<(unsigned)rows, (unsigned)(hidden / 8), 0, (cudaStream_t)stream>>>(
      (const bf16*)x, x_row, (const bf16*)w, (bf16*)out, hidden, eps);
  return (int)cudaGetLastError();
}

// The message of a CUDA error code.
const char* groundrl_cuda_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }

}  // extern "C"
