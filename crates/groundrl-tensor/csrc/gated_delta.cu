// One decoding step of the gated delta rule (Qwen3.5's linear-attention layers), the state updated in
// place: per row and value head, with the query and key of its key head L2-normalised (the query also
// scaled by 1/sqrt(key dim)),
//
//   S <- exp(g) S;   w = beta (v - S^T k);   S <- S + k w^T;   o = S^T q
//
// (crate::qwen3_5::gated_delta's recurrent form). libtorch runs this as about a dozen kernels, several
// of them passes over the f32 state (key dim x value dim per head: 64 KiB at 128 x 128); here one block
// per (value head, row) reads each state column once into registers and writes it back once, so a
// decoding step moves each layer's states twice, the least it can.
//
// Thread j of a block owns column j of the state (all key dims of one value dim): the decay, the read
// S^T k, the write and the output S^T q are all sums over that column, in f32 in the order of the key
// dims. The composition sums its matmuls in cuBLAS's order, so results agree to rounding (the crate's
// CUDA test compares the two).

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <int DK, typename T>
__global__ void gated_delta_step(const T* q, const T* k, const T* v, const float* g, const T* beta,
                                 float* state, float* out, int key_heads, int value_heads, int dv,
                                 float scale, float eps) {
  const int head = blockIdx.x, row = blockIdx.y, j = threadIdx.x;
  const int key_head = head / (value_heads / key_heads);
  __shared__ float sq[DK], sk[DK], norm[2];
  const int64_t qk = ((int64_t)row * key_heads + key_head) * DK;
  for (int i = threadIdx.x; i < DK; i += blockDim.x) {
    sq[i] = to_float(q[qk + i]);
    sk[i] = to_float(k[qk + i]);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float qq = 0.f, kk = 0.f;
    for (int i = 0; i < DK; ++i) {
      qq += sq[i] * sq[i];
      kk += sk[i] * sk[i];
    }
    norm[0] = rsqrtf(qq + eps) * scale;
    norm[1] = rsqrtf(kk + eps);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < DK; i += blockDim.x) {
    sq[i] *= norm[0];
    sk[i] *= norm[1];
  }
  __syncthreads();
  if (j >= dv) return;
  const int64_t rh = (int64_t)row * value_heads + head;
  const float decay = expf(g[rh]);
  const float strength = to_float(beta[rh]);
  float* column = state + rh * DK * dv + j;
  float s[DK];
  float read = 0.f;
#pragma unroll
  for (int i = 0; i < DK; ++i) {
    s[i] = column[(int64_t)i * dv] * decay;
    read += s[i] * sk[i];
  }
  const float w = (to_float(v[rh * dv + j]) - read) * strength;
  float o = 0.f;
#pragma unroll
  for (int i = 0; i < DK; ++i) {
    s[i] += sk[i] * w;
    column[(int64_t)i * dv] = s[i];
    o += s[i] * sq[i];
  }
  out[rh * dv + j] = o;
}

template <int DK, typename T>
int launch(const void* q, const void* k, const void* v, const float* g, const void* beta, float* state,
           float* out, int64_t rows, int key_heads, int value_heads, int dv, float eps,
           cudaStream_t stream) {
  dim3 grid((unsigned)value_heads, (unsigned)rows);
  gated_delta_step<DK, T><<<grid, dv, 0, stream>>>(
      (const T*)q, (const T*)k, (const T*)v, g, (const T*)beta, state, out, key_heads, value_heads, dv,
      rsqrtf((float)DK), eps);
  return (int)cudaGetLastError();
}

template <typename T>
int launch_dk(int dk, const void* q, const void* k, const void* v, const float* g, const void* beta,
              float* state, float* out, int64_t rows, int key_heads, int value_heads, int dv, float eps,
              cudaStream_t stream) {
  switch (dk) {
    case 32:
      return launch<32, T>(q, k, v, g, beta, state, out, rows, key_heads, value_heads, dv, eps, stream);
    case 64:
      return launch<64, T>(q, k, v, g, beta, state, out, rows, key_heads, value_heads, dv, eps, stream);
    case 128:
      return launch<128, T>(q, k, v, g, beta, state, out, rows, key_heads, value_heads, dv, eps, stream);
    default:
      return (int)cudaErrorInvalidValue;
  }
}

}  // namespace

extern "C" {

// q, k (rows, key_heads, dk) and v (rows, value_heads, dv), beta (rows, value_heads), contiguous, bf16
// (`bf16` != 0) or f32; g (rows, value_heads) f32; state (rows, value_heads, dk, dv) f32, updated in
// place; out (rows, value_heads, dv) f32. dk is 32, 64 or 128; dv at most 1024; value_heads a multiple
// of key_heads.
int groundrl_launch_gated_delta_step(const void* q, const void* k, const void* v, const float* g,
                                     const void* beta, float* state, float* out, int64_t rows,
                                     int64_t key_heads, int64_t value_heads, int64_t dk, int64_t dv,
                                     int bf16, float eps, void* stream) {
  if (rows == 0) return 0;
  auto s = (cudaStream_t)stream;
  const int kh = (int)key_heads, vh = (int)value_heads, d = (int)dv;
  if (bf16) {
    return launch_dk<__nv_bfloat16>((int)dk, q, k, v, g, beta, state, out, rows, kh, vh, d, eps, s);
  }
  return launch_dk<float>((int)dk, q, k, v, g, beta, state, out, rows, kh, vh, d, eps, s);
}

}  // extern "C"
