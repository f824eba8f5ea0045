// CUDA kernels for what libtorch runs as several passes over memory: the rotary embedding (of a full
// forward, vision tower or decoder, and of a decoding step with its KV-cache write) and the SwiGLU
// product silu(gate) * up, with the backward passes of the full-forward rotary and SwiGLU
// (autograd.cpp makes them autograd functions); and RMSNorm (one pass per row instead of
// libtorch's, see there). The rotary and SwiGLU kernels compute what transformers' Qwen2.5-VL code
// computes, in its order of operations and roundings, and their backward kernels what libtorch's
// autograd of that code computes, so results equal that composition of PyTorch operations bit for
// bit (checked by the crate's CUDA tests):
// - no contraction into fused multiply-adds (`__fmul_rn`/`__fadd_rn` where the reference rounds a
//   product before adding it), except where ATen's own kernel contracts (the silu backward);
// - IEEE division and `expf` (no fast math), as ATen's silu.
// bf16 activations (the full-forward rotary's tables f32 or bf16); the launchers take raw pointers
// and strides in elements (the C++ shims check the tensors, and that a launch has fewer than 2^31
// threads, so thread indices are split with 32-bit arithmetic) and return the launch's cudaError_t.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "dependent_launch.cuh"

namespace {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float f(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float f(float x) { return x; }
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

// The rotary embedding of a training or prefill forward, and its backward, as one kernel each for
// the tensors autograd.cpp's Rotary function sees: `parts` (rows, heads, dim) tensors with dim = 2
// half, of which the first `rotated` turn by the row's cos and signed_sin tables (rows, dim) and the
// others are copied (the vision tower's values ride along with its queries and keys). Two
// roundings, by the tables' type T:
// - f32 tables (the vision tower, as transformers computes it in f32: `q.float()`, f32 cos/sin):
//   forward out = bf16(x cos + x[pair] signed_sin) from f32 products and sum; backward, as libtorch's
//   autograd of that composition, dx = bf16(g cos + g[pair] signed_sin[pair]), the f32 gradient of
//   the f32 copy of x (which reaches it by two paths) rounded once by the conversion's backward;
// - bf16 tables (the decoder, transformers' bf16 `q * cos + rotate_half(q) * sin`): every product
//   rounded to bf16 before the bf16 sum, forward and backward alike (the gradient of each bf16
//   product is rounded to bf16, then the two are summed).
// A missing gradient (a null source) counts as zero. Sources and destinations are views with one
// row and head stride for all parts. One thread per (row, part, head, W consecutive i < half) writes
// those i and the i + half (W = 4 when the layout allows 8-byte loads, else 1).
struct RotaryParts {
  const bf16 *src0, *src1, *src2;
  int64_t src_row, src_head;
  bf16 *dst0, *dst1, *dst2;
  int64_t dst_row, dst_head;
  int parts, rotated;
};

// A product as the composition rounds it: kept in f32 next to f32 tables, rounded to bf16 next to
// bf16 ones.
__device__ __forceinline__ float product(float x, float table, float) { return __fmul_rn(x, table); }
__device__ __forceinline__ float product(float x, float table, bf16) {
  return f(b(__fmul_rn(x, table)));
}

template <int W, bool Backward, class T>
__global__ void rotary(RotaryParts p, const T* __restrict__ cos, const T* __restrict__ ssin,
                       int64_t rows, int64_t heads, int64_t half) {
  uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  uint32_t chunks = (uint32_t)(half / W);
  if (t >= rows * p.parts * heads * chunks) return;
  int64_t i = (t % chunks) * W, h = (t / chunks) % (uint32_t)heads;
  uint32_t per_row = chunks * (uint32_t)heads * (uint32_t)p.parts;
  int part = (int)((t / (chunks * (uint32_t)heads)) % (uint32_t)p.parts);
  int64_t r = t / per_row;
  // Selected, not indexed: an array of kernel parameters indexed by a thread's value would be copied
  // to local memory by every thread.
  const bf16* src = part == 0 ? p.src0 : part == 1 ? p.src1 : p.src2;
  bf16* o = (part == 0 ? p.dst0 : part == 1 ? p.dst1 : p.dst2) + r * p.dst_row + h * p.dst_head;
  Vec<bf16, W> lo, hi, out_lo, out_hi;
  if (src == nullptr) {
#pragma unroll
    for (int k = 0; k < W; ++k) lo.v[k] = hi.v[k] = b(0.f);
  } else {
    const bf16* xs = src + r * p.src_row + h * p.src_head;
    lo = load<W>(xs + i);
    hi = load<W>(xs + i + half);
  }
  if (part >= p.rotated) {
    store<W>(o + i, lo);
    store<W>(o + i + half, hi);
    return;
  }
  const T* c = cos + r * 2 * half;
  const T* s = ssin + r * 2 * half;
  Vec<T, W> c_lo = load<W>(c + i), c_hi = load<W>(c + i + half);
  Vec<T, W> s_lo = load<W>(s + i), s_hi = load<W>(s + i + half);
  // The backward pairs each half with the other half's signed sin (the transpose of the rotation).
  const Vec<T, W>& s_for_lo = Backward ? s_hi : s_lo;
  const Vec<T, W>& s_for_hi = Backward ? s_lo : s_hi;
#pragma unroll
  for (int k = 0; k < W; ++k) {
    float l = f(lo.v[k]), h2 = f(hi.v[k]);
    out_lo.v[k] = b(__fadd_rn(product(l, f(c_lo.v[k]), T()), product(h2, f(s_for_lo.v[k]), T())));
    out_hi.v[k] = b(__fadd_rn(product(h2, f(c_hi.v[k]), T()), product(l, f(s_for_hi.v[k]), T())));
  }
  store<W>(o + i, out_lo);
  store<W>(o + i + half, out_hi);
}

// One decoding step's rotation tables: for row r at position positions[r] and frequency k <
// half, angle = float(position) x inv_freq[k] in f32; cos (rows, 2 half) holds bf16(cos(angle)) at k
// and k + half, ssin bf16(-sin(angle)) at k and bf16(sin(angle)) at k + half: what libtorch's
// conversion, product, sin, cos, negation, concatenations and bf16 conversions compute
// (`Rotary::of_tokens_composed`), element by element with the same f32 functions, in one kernel.
__global__ void rotary_tables(const int64_t* __restrict__ positions, const float* __restrict__ inv_freq,
                              bf16* __restrict__ cos_out, bf16* __restrict__ ssin, int64_t rows,
                              int64_t half) {
  const int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (t >= rows * half) return;
  const int64_t r = t / half, k = t % half;
  const float angle = (float)positions[r] * inv_freq[k];
  const float c = cosf(angle), s = sinf(angle);
  bf16* c_row = cos_out + r * 2 * half;
  bf16* s_row = ssin + r * 2 * half;
  c_row[k] = c_row[k + half] = __float2bfloat16_rn(c);
  s_row[k] = __float2bfloat16_rn(-s);
  s_row[k + half] = __float2bfloat16_rn(s);
}

// The projected q|k|v a decoding step's rotation reads, value (r, c) of (rows, heads + 2 kv_heads,
// dim) with c = head * dim + i: the product rounded to bf16 with its bias (cuBLAS's, `qkv` with rows
// `row` apart)...
struct Rounded {
  const bf16* qkv;
  int64_t row;
  __device__ __forceinline__ bf16 operator()(int64_t r, int64_t c) const { return qkv[r * row + c]; }
};

// ... or the product as split_product.cu's kSplits f32 slices (kSplits, rows, width) and the bias
// (width), summed here in slice order and rounded once, as cuBLAS rounds its f32 sum plus the bias:
// the same value but for the order of the sums. The count is a template argument so that every
// slice's load is in flight at once.
template <int kSplits>
struct Summed {
  const float* parts;
  const bf16* bias;
  int64_t rows, width;
  __device__ __forceinline__ bf16 operator()(int64_t r, int64_t c) const {
    const float* p = parts + r * width + c;
    float part[kSplits];
#pragma unroll
    for (int s = 0; s < kSplits; ++s) part[s] = p[s * rows * width];
    float sum = part[0];
#pragma unroll
    for (int s = 1; s < kSplits; ++s) sum = __fadd_rn(sum, part[s]);
    return b(__fadd_rn(sum, f(bias[c])));
  }
};

// One decoding step's rotation and cache write. `qkv` gives every row's projected query, key and
// value heads (above); tables (rows, dim) are bf16, and every product and the sum are rounded to bf16
// as transformers' bf16 `q * cos + rotate_half(q) * sin` rounds them. Query heads go to `q_out`
// (rows, heads, dim); key heads, rotated, and value heads, copied, go to column `*column` of the
// caches (rows, kv_heads, capacity, dim). The column is read on the device, so a captured CUDA graph
// replays the step for every column.
template <typename Qkv>
__global__ void decode_rotary_write(Qkv qkv, const bf16* __restrict__ cos, const bf16* __restrict__ ssin,
                                    bf16* __restrict__ q_out, bf16* __restrict__ keys,
                                    bf16* __restrict__ values, const int64_t* __restrict__ column,
                                    int64_t rows, int64_t heads, int64_t kv_heads, int64_t capacity,
                                    int64_t half) {
  allow_dependents();  // the attention's prompt kernel reads none of what this one writes until it waits
  // Launched to start during the q|k|v product (on sm_90: dependent_launch.cuh), it reads and
  // writes nothing before that one has ended.
  wait_prerequisites();
  int64_t all = heads + 2 * kv_heads;
  uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= rows * all * half) return;
  int64_t i = t % (uint32_t)half, h = (t / (uint32_t)half) % (uint32_t)all,
          r = t / (uint32_t)(half * all);
  int64_t dim = 2 * half;
  bf16 lo = qkv(r, h * dim + i), hi = qkv(r, h * dim + i + half);
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

// The gradients of `silu(gate) * up` (rounded as silu_mul rounds it) from the output's gradient
// `grad` (rows, cols), as libtorch's autograd of the two operations computes them: the product's
// gradients bf16(grad up) and bf16(grad silu(gate)), then ATen's silu backward of the first,
// dy s (1 + x (1 - s)) with s = sigmoid(x) in f32, whose sum the compiler fuses into one fma.
// Rows of gate, up and grad strided, outputs contiguous; W as in silu_mul.
template <int W>
__global__ void silu_mul_backward(const bf16* __restrict__ gate, int64_t gate_row,
                                  const bf16* __restrict__ up, int64_t up_row,
                                  const bf16* __restrict__ grad, int64_t grad_row,
                                  bf16* __restrict__ grad_gate, bf16* __restrict__ grad_up,
                                  int64_t rows, int64_t cols) {
  uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  uint32_t chunks = (uint32_t)(cols / W);
  if (t >= rows * chunks) return;
  int64_t r = t / chunks, c = (t % chunks) * W;
  Vec<bf16, W> g = load<W>(gate + r * gate_row + c), u = load<W>(up + r * up_row + c);
  Vec<bf16, W> dy = load<W>(grad + r * grad_row + c), dg, du;
#pragma unroll
  for (int k = 0; k < W; ++k) {
    float x = f(g.v[k]);
    float silu = f(b(x / (1.0f + expf(-x))));
    float d = f(dy.v[k]);
    du.v[k] = b(__fmul_rn(d, silu));
    float ds = f(b(__fmul_rn(d, f(u.v[k]))));
    float s = 1.0f / (1.0f + expf(-x));
    dg.v[k] = b(__fmul_rn(__fmul_rn(ds, s), fmaf(x, 1.0f - s, 1.0f)));
  }
  store<W>(grad_gate + r * cols + c, dg);
  store<W>(grad_up + r * cols + c, du);
}

// RMSNorm as libtorch's bf16 `rms_norm` computes it (layers.rs): in f32, weight * (rsqrt(mean(x^2) +
// eps) * x), rounded once to bf16. Unlike the kernels above it is not bit-exact by construction: its
// sum of squares runs in its own order (threads, warps), so the f32 rsqrt can differ in its last bits
// and a bf16 output by one unit (CUDA test). One block per row of x (rows, hidden), one thread per 8
// values (hidden a multiple of 256, at most 8192): every load of the row in flight at once, where a
// loop over the row would wait for each in turn. `v` holds this thread's 8 values of the row, `out`
// is the row's output.
__device__ __forceinline__ void norm_row(const Vec<bf16, 8>& v, const bf16* __restrict__ w,
                                         bf16* __restrict__ out, int64_t hidden, float eps) {
  __shared__ float warp_sums[32];
  const int c = 8 * threadIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const Vec<bf16, 8> g = load<8>(w + c);
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
  store<8>(out + c, o);
}

// RMSNorm of x (rows, hidden), rows strided, into out (rows, hidden) contiguous; see norm_row.
__global__ void rms_norm(const bf16* __restrict__ x, int64_t x_row, const bf16* __restrict__ w,
                         bf16* __restrict__ out, int64_t hidden, float eps) {
  const int64_t row = blockIdx.x;
  norm_row(load<8>(x + row * x_row + 8 * threadIdx.x), w, out + row * hidden, hidden, eps);
}

// A residual add and the RMSNorm after it, for a product split over k: x (rows, hidden), rows
// strided, += the sum of kSplits f32 partial products (kSplits, rows, hidden) contiguous, summed in
// split order and added to x in f32 with one rounding to bf16, as a GEMM's epilogue rounds
// sum + x (the split-k reduction cuBLAS runs as a kernel of its own); then out = RMSNorm of the new
// x (norm_row). One launch for what was cuBLAS's reduction and the norm's kernel; the split count is
// a template argument so that every part's loads are in flight at once.
template <int kSplits>
__global__ void add_rms_norm(bf16* __restrict__ x, int64_t x_row, const float* __restrict__ parts,
                             const bf16* __restrict__ w, bf16* __restrict__ out, int64_t rows,
                             int64_t hidden, float eps) {
  // Launched to start during the product whose parts it reads (on sm_90: dependent_launch.cuh), it
  // waits for that one before reading anything, and lets the kernel after it (the MLP's, or q|k|v's
  // split product) start at once: that one copies its weights as the product's blocks end, and reads
  // this one's output after it ends.
  allow_dependents();
  wait_prerequisites();
  const int64_t row = blockIdx.x;
  const int c = 8 * threadIdx.x;
  bf16* x_at = x + row * x_row + c;
  const Vec<bf16, 8> old = load<8>(x_at);
  float4 lo[kSplits], hi[kSplits];
#pragma unroll
  for (int s = 0; s < kSplits; ++s) {
    const float4* p = reinterpret_cast<const float4*>(parts + (s * rows + row) * hidden + c);
    lo[s] = p[0];
    hi[s] = p[1];
  }
  float sum[8] = {lo[0].x, lo[0].y, lo[0].z, lo[0].w, hi[0].x, hi[0].y, hi[0].z, hi[0].w};
#pragma unroll
  for (int s = 1; s < kSplits; ++s) {
    sum[0] += lo[s].x, sum[1] += lo[s].y, sum[2] += lo[s].z, sum[3] += lo[s].w;
    sum[4] += hi[s].x, sum[5] += hi[s].y, sum[6] += hi[s].z, sum[7] += hi[s].w;
  }
  Vec<bf16, 8> v;
#pragma unroll
  for (int k = 0; k < 8; ++k) v.v[k] = b(sum[k] + f(old.v[k]));
  store<8>(x_at, v);
  norm_row(v, w, out + row * hidden, hidden, eps);
}

constexpr int kThreads = 256;

unsigned blocks(int64_t threads) { return (unsigned)((threads + kThreads - 1) / kThreads); }

}  // namespace

extern "C" {

// Forward (backward = 0) or backward (1) of `rotary`, with f32 (bf16_tables = 0) or bf16 tables;
// see there. src and dst: `parts` pointers each (a null source counts as zeros); strides in elements.
int groundrl_launch_rotary(int backward, int bf16_tables, const void* const* src, int64_t src_row,
                           int64_t src_head, void* const* dst, int64_t dst_row, int64_t dst_head,
                           int parts, int rotated, const void* cos, const void* ssin, int64_t rows,
                           int64_t heads, int64_t half, void* stream) {
  auto s = (cudaStream_t)stream;
  if (parts < 1 || parts > 3 || rotated > parts) return (int)cudaErrorInvalidValue;
  if (rows * heads * half == 0) return 0;
  const void* any[3] = {nullptr, nullptr, nullptr};
  void* out[3] = {dst[0], dst[0], dst[0]};
  for (int k = 0; k < parts; ++k) {
    any[k] = src[k];
    out[k] = dst[k];
  }
  RotaryParts p{(const bf16*)any[0], (const bf16*)any[1], (const bf16*)any[2], src_row, src_head,
                (bf16*)out[0], (bf16*)out[1], (bf16*)out[2], dst_row, dst_head, parts, rotated};
  int64_t table_bytes = bf16_tables ? 2 : 4;
  bool vec = half % 4 == 0 &&
             aligned(8, 2, {any[0], any[1], any[2], out[0], out[1], out[2]},
                     {src_row, src_head, dst_row, dst_head, half}) &&
             aligned(4 * table_bytes, table_bytes, {cos, ssin}, {half});
  unsigned grid = blocks(rows * parts * heads * half / (vec ? 4 : 1));
  auto launch = [&](auto w, auto back, auto table) {
    using T = decltype(table);
    rotary<decltype(w)::value, decltype(back)::value, T><<<grid, kThreads, 0, s>>>(
        p, (const T*)cos, (const T*)ssin, rows, heads, half);
  };
  using One = std::integral_constant<int, 1>;
  using Four = std::integral_constant<int, 4>;
  using Fwd = std::false_type;
  using Bwd = std::true_type;
  if (bf16_tables) {
    if (vec) backward ? launch(Four(), Bwd(), bf16()) : launch(Four(), Fwd(), bf16());
    else backward ? launch(One(), Bwd(), bf16()) : launch(One(), Fwd(), bf16());
  } else {
    if (vec) backward ? launch(Four(), Bwd(), 0.f) : launch(Four(), Fwd(), 0.f);
    else backward ? launch(One(), Bwd(), 0.f) : launch(One(), Fwd(), 0.f);
  }
  return (int)cudaGetLastError();
}

int groundrl_launch_rotary_tables(const int64_t* positions, const float* inv_freq, void* cos,
                                  void* ssin, int64_t rows, int64_t half, void* stream) {
  const int64_t n = rows * half;
  if (n == 0) return 0;
  rotary_tables<<<blocks(n), kThreads, 0, (cudaStream_t)stream>>>(positions, inv_freq, (bf16*)cos,
                                                                   (bf16*)ssin, rows, half);
  return (int)cudaGetLastError();
}

int groundrl_launch_decode_rotary_write(const void* qkv, int64_t qkv_row, const float* parts,
                                        int64_t splits, const void* bias, const void* cos,
                                        const void* ssin, void* q_out, void* keys, void* values,
                                        const int64_t* column, int64_t rows, int64_t heads,
                                        int64_t kv_heads, int64_t capacity, int64_t half,
                                        void* stream) {
  int64_t n = rows * (heads + 2 * kv_heads) * half;
  if (n == 0) return 0;
  const auto launch = [&](auto source) -> cudaError_t {
    return launch_chained(decode_rotary_write<decltype(source)>, dim3(blocks(n)), dim3(kThreads), 0,
                          (cudaStream_t)stream, source, (const bf16*)cos, (const bf16*)ssin,
                          (bf16*)q_out, (bf16*)keys, (bf16*)values, column, rows, heads, kv_heads,
                          capacity, half);
  };
  const int64_t width = (heads + 2 * kv_heads) * 2 * half;
  cudaError_t e;
  switch (parts == nullptr ? 0 : splits) {
    case 0: e = launch(Rounded{(const bf16*)qkv, qkv_row}); break;
    case 1: e = launch(Summed<1>{parts, (const bf16*)bias, rows, width}); break;
    case 2: e = launch(Summed<2>{parts, (const bf16*)bias, rows, width}); break;
    case 3: e = launch(Summed<3>{parts, (const bf16*)bias, rows, width}); break;
    case 4: e = launch(Summed<4>{parts, (const bf16*)bias, rows, width}); break;
    default: return (int)cudaErrorInvalidValue;
  }
  return e != cudaSuccess ? (int)e : (int)cudaGetLastError();
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

int groundrl_launch_silu_mul_backward(const void* gate, int64_t gate_row, const void* up,
                                      int64_t up_row, const void* grad, int64_t grad_row,
                                      void* grad_gate, void* grad_up, int64_t rows, int64_t cols,
                                      void* stream) {
  auto s = (cudaStream_t)stream;
  if (rows * cols == 0) return 0;
  auto launch = [&](auto w) {
    constexpr int W = decltype(w)::value;
    silu_mul_backward<W><<<blocks(rows * cols / W), kThreads, 0, s>>>(
        (const bf16*)gate, gate_row, (const bf16*)up, up_row, (const bf16*)grad, grad_row,
        (bf16*)grad_gate, (bf16*)grad_up, rows, cols);
  };
  if (aligned(16, 2, {gate, up, grad, grad_gate, grad_up}, {gate_row, up_row, grad_row, cols})) {
    launch(std::integral_constant<int, 8>());
  } else {
    launch(std::integral_constant<int, 1>());
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

// x += the sum of parts (splits, rows, hidden) f32, 1 to 4 splits, then out = RMSNorm of x; see
// add_rms_norm.
int groundrl_launch_add_rms_norm(void* x, int64_t x_row, const float* parts, int64_t splits,
                                 const void* w, void* out, int64_t rows, int64_t hidden, float eps,
                                 void* stream) {
  if (rows == 0) return 0;
  if (hidden % 256 || hidden > 8192 || splits < 1 || splits > 4 ||
      !aligned(16, 2, {x, w, out, parts}, {x_row})) {
    return (int)cudaErrorInvalidValue;
  }
  auto launch = [&](auto count) -> cudaError_t {
    const auto kernel = add_rms_norm<decltype(count)::value>;
    // Started early, on SMs set for the product's shared memory, so that neither waits for the SM to
    // change it.
    const cudaError_t e = dependent_launches() ? allow_shared(kernel, 0) : cudaSuccess;
    if (e != cudaSuccess) return e;
    return launch_chained(kernel, dim3((unsigned)rows), dim3((unsigned)(hidden / 8)), 0,
                          (cudaStream_t)stream, (bf16*)x, x_row, parts, (const bf16*)w, (bf16*)out,
                          rows, hidden, eps);
  };
  cudaError_t e;
  switch (splits) {
    case 1: e = launch(std::integral_constant<int, 1>()); break;
    case 2: e = launch(std::integral_constant<int, 2>()); break;
    case 3: e = launch(std::integral_constant<int, 3>()); break;
    default: e = launch(std::integral_constant<int, 4>()); break;
  }
  if (e != cudaSuccess) return (int)e;
  return (int)cudaGetLastError();
}

// The message of a CUDA error code.
const char* groundrl_cuda_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }

}  // extern "C"
