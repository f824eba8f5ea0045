// One decoding step of Qwen3.5's linear-attention layer between its input projections and its output
// projection, as two kernels where libtorch runs about forty (crate::qwen3_5::linear_attention's
// composition):
//
// conv_step: the short causal depthwise convolution of each channel over its last kernel - 1 inputs
//   and the new one, then SiLU; the channel's inputs shifted in place.
//
// delta_step: per row and value head, with the query and key of its key head L2-normalised (the query
//   also scaled by 1/sqrt(key dim)), the decay g = -exp(A_log) softplus(a + dt_bias) and the write
//   strength beta = sigmoid(b) of the head,
//
//     S <- exp(g) S;   w = beta (v - S^T k);   S <- S + k w^T;   o = S^T q
//
//   (crate::qwen3_5::gated_delta's recurrent form), then the gated RMSNorm of o: RMSNorm with the
//   layer's weight, times SiLU of the output gate z.
//
// The delta rule moves each head's f32 state (key dim x value dim: 64 KiB at 128 x 128) once in and
// once out, the least a step can. A block owns one (value head, row); its threads split the state by
// value column j and by a part p of 32 key dims, so that each thread holds 32 state values in
// registers (a thread per whole column of 128 spills them to local memory and runs at a third of the
// memory bandwidth). The sums over key dims (S^T k and S^T q) are per part, then over the parts
// through shared memory, in f32. The roundings to the activations' dtype are the composition's: the
// convolution's output, then SiLU's; beta; the rule's output; the normalised output, then times the
// norm's weight, then times the gate. Sums run in other orders than libtorch's, so results agree to
// rounding (the crate's CUDA test compares the two).

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}

// x rounded to T and back, as libtorch's T tensors hold intermediate results.
template <typename T>
__device__ __forceinline__ float rounded(float x) {
  return to_float(from_float<T>(x));
}

__device__ __forceinline__ float silu(float x) { return x / (1.f + expf(-x)); }

// libtorch's softplus with beta 1 and threshold 20.
__device__ __forceinline__ float softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }

// Thread (row, channel): out = SiLU(sum_t w_t x_t) over the channel's last kernel - 1 inputs in
// `state` (rows, channels, kernel - 1) and the new input in `x` (rows, channels); state shifted.
template <typename T>
__global__ void conv_step(const T* x, T* state, const T* weight, T* out, int64_t rows, int channels,
                          int kernel) {
  const int64_t at = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (at >= rows * channels) return;
  const int channel = (int)(at % channels);
  T* kept = state + at * (kernel - 1);
  const T* w = weight + (int64_t)channel * kernel;
  const T newest = x[at];
  float sum = 0.f;
  for (int t = 0; t < kernel - 1; ++t) sum += to_float(kept[t]) * to_float(w[t]);
  sum += to_float(newest) * to_float(w[kernel - 1]);
  for (int t = 0; t + 1 < kernel - 1; ++t) kept[t] = kept[t + 1];
  kept[kernel - 2] = newest;
  out[at] = from_float<T>(silu(rounded<T>(sum)));
}

// The sum of v over the block's threads, returned to every thread; `scratch` holds a float a warp.
__device__ float block_sum(float v, float* scratch) {
  for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = (blockDim.x + 31) / 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.f;
  for (int i = 0; i < warps; ++i) total += scratch[i];
  return total;
}

// What delta_step reads besides the state: `qkv` (rows, qkv_row) the convolution's output with the
// queries (key heads x DK), keys and values side by side at the start of each row; z (rows, value
// heads x dv) the output gate; a, b (rows, value heads); a_log, dt_bias (value heads) and norm (dv)
// the layer's parameters.
template <typename T>
struct StepInputs {
  const T *qkv, *z, *a, *b, *a_log, *dt_bias, *norm;
  int64_t qkv_row;
  int key_heads, value_heads, dv;
  float scale, l2_eps, norm_eps;
};

// At most 512 threads a block, so that its registers fit an SM.
template <int DK, typename T>
__global__ void __launch_bounds__(512) delta_step(StepInputs<T> in, float* state, T* out) {
  constexpr int PER = 32;  // key dims a thread holds
  const int head = blockIdx.x, row = blockIdx.y, dv = in.dv;
  const int j = threadIdx.x % dv, part = threadIdx.x / dv;
  const int key_head = head / (in.value_heads / in.key_heads);
  __shared__ float sq[DK], sk[DK], scalars[2], scratch[32];
  extern __shared__ float partial[];  // (DK / PER) x dv
  const T* q = in.qkv + row * in.qkv_row + key_head * DK;
  const T* k = q + in.key_heads * DK;
  const T* v = in.qkv + row * in.qkv_row + 2 * in.key_heads * DK + head * dv;
  for (int i = threadIdx.x; i < DK; i += blockDim.x) {
    sq[i] = to_float(q[i]);
    sk[i] = to_float(k[i]);
  }
  __syncthreads();
  float qq = 0.f, kk = 0.f;
  for (int i = threadIdx.x; i < DK; i += blockDim.x) {
    qq += sq[i] * sq[i];
    kk += sk[i] * sk[i];
  }
  qq = block_sum(qq, scratch);
  kk = block_sum(kk, scratch);
  const int64_t rh = (int64_t)row * in.value_heads + head;
  if (threadIdx.x == 0) {
    const float steps = softplus(to_float(in.a[rh]) + to_float(in.dt_bias[head]));
    scalars[0] = expf(-(steps * expf(to_float(in.a_log[head]))));
    scalars[1] = rounded<T>(1.f / (1.f + expf(-to_float(in.b[rh]))));
  }
  const float qn = rsqrtf(qq + in.l2_eps), kn = rsqrtf(kk + in.l2_eps);
  __syncthreads();
  for (int i = threadIdx.x; i < DK; i += blockDim.x) {
    sq[i] = sq[i] * qn * in.scale;
    sk[i] *= kn;
  }
  __syncthreads();
  const float decay = scalars[0], strength = scalars[1];
  const int first = part * PER;
  float* column = state + rh * DK * dv + (int64_t)first * dv + j;
  float s[PER];
  float read = 0.f;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    s[i] = column[(int64_t)i * dv] * decay;
    read += s[i] * sk[first + i];
  }
  partial[part * dv + j] = read;
  __syncthreads();
  read = 0.f;
  for (int p = 0; p < DK / PER; ++p) read += partial[p * dv + j];
  const float w = (to_float(v[j]) - read) * strength;
  float o = 0.f;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    s[i] += sk[first + i] * w;
    column[(int64_t)i * dv] = s[i];
    o += s[i] * sq[first + i];
  }
  __syncthreads();  // every thread has read `partial`'s sums of S^T k
  partial[part * dv + j] = o;
  __syncthreads();
  o = 0.f;
  for (int p = 0; p < DK / PER; ++p) o += partial[p * dv + j];
  const float x = rounded<T>(o);
  const float squares = block_sum(part == 0 ? x * x : 0.f, scratch);
  if (part != 0) return;
  const float normed = rounded<T>(x * rsqrtf(squares / dv + in.norm_eps));
  const float weighted = rounded<T>(normed * to_float(in.norm[j]));
  out[rh * dv + j] = from_float<T>(weighted * silu(to_float(in.z[rh * dv + j])));
}

template <int DK, typename T>
int launch_delta(const StepInputs<T>& in, float* state, T* out, int64_t rows, cudaStream_t stream) {
  dim3 grid((unsigned)in.value_heads, (unsigned)rows);
  const int threads = in.dv * (DK / 32);
  const size_t shared = sizeof(float) * threads;
  delta_step<DK, T><<<grid, threads, shared, stream>>>(in, state, out);
  return (int)cudaGetLastError();
}

template <typename T>
int launch(const void* qkv_proj, void* conv_state, const void* conv_weight, void* qkv, int kernel,
           const void* z, const void* a, const void* b, const void* a_log, const void* dt_bias,
           const void* norm, float* state, void* out, int64_t rows, int key_heads, int value_heads,
           int dk, int dv, float l2_eps, float norm_eps, cudaStream_t stream) {
  const int channels = 2 * key_heads * dk + value_heads * dv;
  const int64_t threads = rows * channels;
  conv_step<T><<<(unsigned)((threads + 255) / 256), 256, 0, stream>>>(
      (const T*)qkv_proj, (T*)conv_state, (const T*)conv_weight, (T*)qkv, rows, channels, kernel);
  const int code = (int)cudaGetLastError();
  if (code != 0) return code;
  StepInputs<T> in{(const T*)qkv, (const T*)z, (const T*)a, (const T*)b, (const T*)a_log,
                   (const T*)dt_bias, (const T*)norm, channels, key_heads, value_heads, dv,
                   (float)(1.0 / std::sqrt((double)dk)), l2_eps, norm_eps};
  switch (dk) {
    case 32:
      return launch_delta<32, T>(in, state, (T*)out, rows, stream);
    case 64:
      return launch_delta<64, T>(in, state, (T*)out, rows, stream);
    case 128:
      return launch_delta<128, T>(in, state, (T*)out, rows, stream);
    default:
      return (int)cudaErrorInvalidValue;
  }
}

}  // namespace

extern "C" {

// All of one dtype T (bf16 when `bf16` != 0, else f32) but the state: qkv_proj (rows, channels) the
// input projection's output, channels = 2 key_heads dk + value_heads dv; conv_state (rows, channels,
// kernel - 1), updated in place; conv_weight (channels, kernel); qkv (rows, channels) the
// convolution's output, written; z (rows, value_heads dv); a, b (rows, value_heads); a_log, dt_bias
// (value_heads); norm (dv); state (rows, value_heads, dk, dv) f32, updated in place; out (rows,
// value_heads dv), written. All contiguous. dk is 32, 64 or 128, dv x dk / 32 (a block's threads) a
// multiple of 32 and at most 512, kernel at least 2, value_heads a multiple of key_heads, rows at
// most 65,535.
int groundrl_launch_linear_attention_step(const void* qkv_proj, void* conv_state,
                                          const void* conv_weight, void* qkv, int64_t kernel,
                                          const void* z, const void* a, const void* b,
                                          const void* a_log, const void* dt_bias, const void* norm,
                                          float* state, void* out, int64_t rows, int64_t key_heads,
                                          int64_t value_heads, int64_t dk, int64_t dv, int bf16,
                                          float l2_eps, float norm_eps, void* stream) {
  if (rows == 0) return 0;
  auto s = (cudaStream_t)stream;
  const int kh = (int)key_heads, vh = (int)value_heads, k = (int)dk, d = (int)dv, w = (int)kernel;
  if (bf16) {
    return launch<__nv_bfloat16>(qkv_proj, conv_state, conv_weight, qkv, w, z, a, b, a_log, dt_bias,
                                 norm, state, out, rows, kh, vh, k, d, l2_eps, norm_eps, s);
  }
  return launch<float>(qkv_proj, conv_state, conv_weight, qkv, w, z, a, b, a_log, dt_bias, norm,
                       state, out, rows, kh, vh, k, d, l2_eps, norm_eps, s);
}

}  // extern "C"
