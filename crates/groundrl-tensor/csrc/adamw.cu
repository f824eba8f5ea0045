// AdamW's update of one parameter in one pass over memory: the gradient is read once, the moments and
// the f32 master (when kept) are read and written once, the parameter written once. The optimizer of
// groundrl-train (optim/adamw.rs) composes the same update from about a dozen libtorch operations,
// each a full pass over f32 tensors of the parameter's size; for a 3B model that is about 500 GB of
// traffic per step against about 100 GB here.
//
// The arithmetic follows that composition operation by operation, each result rounded to f32 where
// the composition's kernel rounds it (`__fmul_rn` and friends: no contraction across operations),
// and inside an operation as ATen's CUDA kernel computes it (lerp's fused multiply-add, division by
// a scalar as multiplication by its f32 reciprocal). groundrl-train's CUDA test compares the two:
// the moments and bf16 parameters come out equal, 0.7% of the f32 masters one f32 unit apart (some
// operation rounds differently; which one is not known).

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace {

using bf16 = __nv_bfloat16;

// The scalars of one update, as the composition hands them to its kernels (f32).
struct AdamwScalars {
  float grad_scale;    // the clipping factor, 1 when not clipped
  float w1, w2;        // 1 - beta1, 1 - beta2: the lerp weights of the moments
  float inv_bias2;     // 1 / sqrt(1 - beta2^t)
  float eps;
  float decay;         // 1 - lr * weight_decay
  float step_size;     // lr / (1 - beta1^t)
};

// ATen's lerp: self + w (end - self) for small weights, else end - (end - self)(1 - w), each with
// its product fused into the sum as nvcc compiles ATen's expression.
__device__ __forceinline__ float lerp(float self, float end, float w) {
  float diff = __fsub_rn(end, self);
  return w < 0.5f ? fmaf(w, diff, self) : fmaf(-diff, __fsub_rn(1.0f, w), end);
}

// One element's update: the moments m, v and the value p (the f32 master, or the parameter
// widened) from the gradient g as stored.
__device__ __forceinline__ void update(float g, float& m, float& v, float& p, const AdamwScalars& k) {
  g = __fmul_rn(g, k.grad_scale);
  m = lerp(m, g, k.w1);
  v = lerp(v, __fmul_rn(g, g), k.w2);
  float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(v), k.inv_bias2), k.eps);
  p = __fmul_rn(p, k.decay);
  p = __fsub_rn(p, __fmul_rn(__fdiv_rn(m, denom), k.step_size));
}

// N consecutive values of a parameter-typed or f32 array, group i, in one load or store (N = 4:
// 8 bytes of bf16, 16 of f32; the array 16-byte aligned).
struct alignas(8) Bf16x4 { bf16 x[4]; };
template <int N>
__device__ __forceinline__ void load(const bf16* p, int64_t i, float* out) {
  if constexpr (N == 4) {
    Bf16x4 q = reinterpret_cast<const Bf16x4*>(p)[i];
    for (int j = 0; j < 4; ++j) out[j] = __bfloat162float(q.x[j]);
  } else {
    out[0] = __bfloat162float(p[i]);
  }
}
template <int N>
__device__ __forceinline__ void load(const float* p, int64_t i, float* out) {
  if constexpr (N == 4) {
    float4 q = reinterpret_cast<const float4*>(p)[i];
    out[0] = q.x, out[1] = q.y, out[2] = q.z, out[3] = q.w;
  } else {
    out[0] = p[i];
  }
}
template <int N>
__device__ __forceinline__ void store(bf16* p, int64_t i, const float* in) {
  if constexpr (N == 4) {
    Bf16x4 q;
    for (int j = 0; j < 4; ++j) q.x[j] = __float2bfloat16_rn(in[j]);
    reinterpret_cast<Bf16x4*>(p)[i] = q;
  } else {
    p[i] = __float2bfloat16_rn(in[0]);
  }
}
template <int N>
__device__ __forceinline__ void store(float* p, int64_t i, const float* in) {
  if constexpr (N == 4) {
    reinterpret_cast<float4*>(p)[i] = make_float4(in[0], in[1], in[2], in[3]);
  } else {
    p[i] = in[0];
  }
}

// N elements a thread (grid-stride over `groups` groups of N), each array read and written in
// vectors where N = 4: a thread's loads are then few and wide, which is what reaches the memory's
// bandwidth (one element a thread ran at about 3.1 TB/s of an H200's 4.8). P: the parameter's and
// the gradient's type; `master`: the f32 copy the update applies to, or null (then the parameter
// itself, widened).
template <class P, int N>
__global__ void adamw(P* __restrict__ param, const P* __restrict__ grad, float* __restrict__ exp_avg,
                      float* __restrict__ exp_avg_sq, float* __restrict__ master, int64_t groups,
                      AdamwScalars k) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < groups;
       i += (int64_t)gridDim.x * blockDim.x) {
    float g[N], m[N], v[N], p[N];
    load<N>(grad, i, g);
    load<N>(exp_avg, i, m);
    load<N>(exp_avg_sq, i, v);
    if (master != nullptr) {
      load<N>(master, i, p);
    } else {
      load<N>(param, i, p);
    }
    for (int j = 0; j < N; ++j) update(g[j], m[j], v[j], p[j], k);
    store<N>(exp_avg, i, m);
    store<N>(exp_avg_sq, i, v);
    if (master != nullptr) store<N>(master, i, p);
    store<N>(param, i, p);
  }
}

constexpr int kThreads = 256;

unsigned blocks(int64_t threads) {
  int64_t wanted = (threads + kThreads - 1) / kThreads;
  return (unsigned)(wanted < 65536 ? wanted : 65536);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The vector kernel over the whole groups of four where every array is 16-byte aligned, the
// one-element kernel over the rest.
template <class P>
int launch(void* param, const void* grad, float* exp_avg, float* exp_avg_sq, float* master,
           int64_t n, const AdamwScalars& k, cudaStream_t s) {
  bool vectors = aligned16(param) && aligned16(grad) && aligned16(exp_avg) && aligned16(exp_avg_sq) &&
                 (master == nullptr || aligned16(master));
  int64_t done = vectors ? n / 4 * 4 : 0;
  if (done > 0) {
    adamw<P, 4><<<blocks(done / 4), kThreads, 0, s>>>((P*)param, (const P*)grad, exp_avg, exp_avg_sq,
                                                      master, done / 4, k);
  }
  if (done < n) {
    adamw<P, 1><<<blocks(n - done), kThreads, 0, s>>>((P*)param + done, (const P*)grad + done,
                                                      exp_avg + done, exp_avg_sq + done,
                                                      master != nullptr ? master + done : nullptr, n - done, k);
  }
  return (int)cudaGetLastError();
}

}  // namespace

extern "C" {

// One AdamW update of `n` contiguous elements; `param` and `grad` bf16 (param_bf16 = 1) or f32,
// the moments f32, `master` f32 or null. The scalars in AdamwScalars' order.
int groundrl_launch_adamw(void* param, int param_bf16, const void* grad, float* exp_avg,
                          float* exp_avg_sq, float* master, int64_t n, const float* scalars,
                          void* stream) {
  if (n == 0) return 0;
  AdamwScalars k{scalars[0], scalars[1], scalars[2], scalars[3], scalars[4], scalars[5], scalars[6]};
  auto s = (cudaStream_t)stream;
  return param_bf16 ? launch<bf16>(param, grad, exp_avg, exp_avg_sq, master, n, k, s)
                    : launch<float>(param, grad, exp_avg, exp_avg_sq, master, n, k, s);
}

}  // extern "C"
