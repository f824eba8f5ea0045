// Token selection for rows that do not filter by top-k or top-p (`rollout/sampling.rs`), in one
// kernel where libtorch's composition takes about 25 kernels per decoding step (full-vocabulary f32
// passes, timed in docs/performance.md: division, log-softmax, masking, softmax, padding, sums,
// scans). Per row, the same quantities:
// - scaled logits x / T (IEEE division, as the composition);
// - the token: the first maximum of the allowed (not banned) scaled logits for greedy rows; else an
//   inverse-CDF draw in token-id order, the first token whose cumulative weight exp(x - max) exceeds
//   u x the total, found in two levels (the warps' contiguous ranges, then within one range) and held
//   at the range's last token of non-zero weight when rounding puts the target past it;
// - its log-probability over the whole vocabulary, banned tokens included: x - max - log(sum exp).
// Sums run in this kernel's order (each warp over its range, then the warps), so a log-prob can
// differ from log_softmax's in the last f32 bits and a draw lying within rounding of a boundary can
// pick the neighbouring token (the crate's CUDA test compares with the composition).
//
// One block of 1,024 threads per row; warp w owns the w-th of 32 contiguous ranges of the vocabulary
// and reads it four logits per lane at a time. Logits in f32 or bf16 (converted exactly to f32).

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kWarps = 32;
constexpr unsigned kAll = 0xffffffffu;

// A running maximum and sum of exp(x - maximum) (online softmax), -inf and 0 when empty.
struct Online {
  float m = -INFINITY, s = 0.f;

  __device__ void add(float x) {
    if (x == -INFINITY) return;  // weight 0 (and exp(-inf - -inf) would be NaN)
    if (x > m) {
      s = s * expf(m - x) + 1.f;
      m = x;
    } else {
      s += expf(x - m);
    }
  }

  __device__ void merge(float om, float os) {
    if (om == -INFINITY) return;
    if (om > m) {
      s = s * expf(m - om) + os;
      m = om;
    } else {
      s += os * expf(om - m);
    }
  }

  __device__ void merge_warp() {
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
      const float om = __shfl_xor_sync(kAll, m, o), os = __shfl_xor_sync(kAll, s, o);
      merge(om, os);
    }
  }
};

// Four logits from x + i (16 bytes of f32, 8 of bf16, aligned: i and the row length multiples of 4).
__device__ __forceinline__ float4 four(const float* x, int64_t i) {
  return *reinterpret_cast<const float4*>(x + i);
}

__device__ __forceinline__ float4 four(const __nv_bfloat16* x, int64_t i) {
  const uint2 raw = *reinterpret_cast<const uint2*>(x + i);
  return make_float4(__uint_as_float(raw.x << 16), __uint_as_float(raw.x & 0xffff0000u),
                     __uint_as_float(raw.y << 16), __uint_as_float(raw.y & 0xffff0000u));
}

__device__ __forceinline__ float one(const float* x, int64_t i) { return x[i]; }
__device__ __forceinline__ float one(const __nv_bfloat16* x, int64_t i) { return __bfloat162float(x[i]); }

// The larger value, the smaller index between equals (the first maximum).
__device__ __forceinline__ void keep_first_max(float& v, int64_t& i, float ov, int64_t oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

struct RowState {
  float raw_m, raw_s;   // all tokens
  float max_allowed;    // the largest allowed scaled logit
  float target;         // u x the allowed total, in units of exp(x - max_allowed)
  float before;         // the allowed weight of the ranges before `range`
  int range;            // the warp range holding the draw
  int64_t first_max;    // the greedy token
};

template <class T>
__global__ void __launch_bounds__(kWarps * 32)
sample_rows(const T* __restrict__ logits, int64_t vocab, const float* __restrict__ temperature,
            const bool* __restrict__ greedy, const bool* __restrict__ banned,
            const float* __restrict__ uniforms, int64_t* __restrict__ tokens,
            float* __restrict__ logprobs) {
  __shared__ float allowed_m[kWarps], allowed_s[kWarps], raw_m[kWarps], raw_s[kWarps], best_v[kWarps];
  __shared__ int64_t best_i[kWarps];
  __shared__ RowState row_state;
  const int64_t row = blockIdx.x;
  const T* x = logits + row * vocab;
  const float t = temperature[row];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t span = ((vocab + kWarps - 1) / kWarps + 3) / 4 * 4;
  const int64_t begin = min(warp * span, vocab), end = min(begin + span, vocab);

  // Pass 1: per warp, the online softmax of its allowed and of its banned scaled logits, and the
  // first maximum of the allowed ones.
  Online allowed, banned_part;
  float best = -INFINITY;
  int64_t best_at = vocab;
  for (int64_t i = begin + 4 * lane; i < end; i += 128) {
    const float4 v = four(x, i);
    const uchar4 ban = *reinterpret_cast<const uchar4*>(banned + i);
    const float s[4] = {v.x / t, v.y / t, v.z / t, v.w / t};
    const bool out[4] = {ban.x != 0, ban.y != 0, ban.z != 0, ban.w != 0};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (out[k]) {
        banned_part.add(s[k]);
      } else {
        allowed.add(s[k]);
        if (s[k] > best) {
          best = s[k];
          best_at = i + k;
        }
      }
    }
  }
  allowed.merge_warp();
  banned_part.merge_warp();
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    keep_first_max(best, best_at, __shfl_xor_sync(kAll, best, o), __shfl_xor_sync(kAll, best_at, o));
  }
  if (lane == 0) {
    Online raw = allowed;
    raw.merge(banned_part.m, banned_part.s);
    allowed_m[warp] = allowed.m;
    allowed_s[warp] = allowed.s;
    raw_m[warp] = raw.m;
    raw_s[warp] = raw.s;
    best_v[warp] = best;
    best_i[warp] = best_at;
  }
  __syncthreads();

  // The row's totals; the range of the draw, found by one thread over the 32 ranges in order.
  if (threadIdx.x == 0) {
    Online raw;
    float top = -INFINITY, max_allowed = -INFINITY;
    int64_t top_at = vocab;
    for (int w = 0; w < kWarps; ++w) {
      raw.merge(raw_m[w], raw_s[w]);
      keep_first_max(top, top_at, best_v[w], best_i[w]);
      max_allowed = fmaxf(max_allowed, allowed_m[w]);
    }
    float weight[kWarps], total = 0.f;
    for (int w = 0; w < kWarps; ++w) {
      weight[w] = allowed_m[w] == -INFINITY ? 0.f : allowed_s[w] * expf(allowed_m[w] - max_allowed);
      total += weight[w];
    }
    const float target = uniforms[row] * total;
    float before = 0.f;
    int range = -1, last_nonzero = 0;
    float before_last = 0.f;
    for (int w = 0; w < kWarps; ++w) {
      if (weight[w] > 0.f) {
        last_nonzero = w;
        before_last = before;
      }
      if (before + weight[w] > target && weight[w] > 0.f) {
        range = w;
        break;
      }
      before += weight[w];
    }
    if (range < 0) {  // rounding put the target past the total: the last range that can be drawn
      range = last_nonzero;
      before = before_last;
    }
    row_state = RowState{raw.m, raw.s, max_allowed, target, before, range, top_at};
  }
  __syncthreads();
  const RowState st = row_state;
  const auto finish = [&](int64_t token) {
    // No token is left only when no token has weight (all banned, or NaN logits): the first
    // maximum then, else 0.
    if (token < 0 || token >= vocab) token = st.first_max < vocab ? st.first_max : 0;
    tokens[row] = token;
    logprobs[row] = (one(x, token) / t - st.raw_m) - logf(st.raw_s);
  };
  if (greedy[row]) {
    if (threadIdx.x == 0) finish(st.first_max);
    return;
  }
  if (warp != st.range) return;

  // Pass 2, one warp: the cumulative weight through its range, 128 tokens at a time, until it
  // exceeds the target.
  float run = st.before;
  int64_t last_drawable = -1;
  for (int64_t c = begin; c < end; c += 128) {
    const int64_t i = c + 4 * lane;
    float e[4] = {0.f, 0.f, 0.f, 0.f};
    if (i < end) {
      const float4 v = four(x, i);
      const uchar4 ban = *reinterpret_cast<const uchar4*>(banned + i);
      const float s[4] = {v.x / t, v.y / t, v.z / t, v.w / t};
      const bool out[4] = {ban.x != 0, ban.y != 0, ban.z != 0, ban.w != 0};
#pragma unroll
      for (int k = 0; k < 4; ++k) e[k] = out[k] ? 0.f : expf(s[k] - st.max_allowed);
    }
    const float own = (e[0] + e[1]) + (e[2] + e[3]);
    float inclusive = own;
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const float up = __shfl_up_sync(kAll, inclusive, o);
      if (lane >= o) inclusive += up;
    }
    int64_t mine = -1;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (e[k] > 0.f) mine = i + k;
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
      const int64_t other = __shfl_xor_sync(kAll, mine, o);
      mine = other > mine ? other : mine;
    }
    if (mine >= 0) last_drawable = mine;
    // Only a lane with weight can hold the draw: the lanes' scans group their sums differently, so
    // one with none (banned tokens, or past the range) could otherwise cross first by a rounding.
    const unsigned above = __ballot_sync(kAll, own > 0.f && run + inclusive > st.target);
    if (above) {
      const int first = __ffs(above) - 1;
      if (lane == first) {
        // In order within the lane; held at its last token of non-zero weight if the sequential
        // sum stays within rounding of the target.
        float cumulative = run + inclusive - own;
        int64_t token = -1, lane_last = -1;
        for (int k = 0; k < 4; ++k) {
          cumulative += e[k];
          if (e[k] > 0.f) lane_last = i + k;
          if (token < 0 && e[k] > 0.f && cumulative > st.target) token = i + k;
        }
        finish(token >= 0 ? token : lane_last >= 0 ? lane_last : last_drawable);
      }
      return;
    }
    run += __shfl_sync(kAll, inclusive, 31);
  }
  if (lane == 0) finish(last_drawable);
}

}  // namespace

extern "C" {

// logits (rows, vocab) contiguous, f32 (`bf16` 0) or bf16 (1), vocab a multiple of 4; temperature,
// uniforms (rows,) f32; greedy (rows,) bool; banned (vocab,) bool; writes tokens (rows,) int64 and
// logprobs (rows,) f32.
int groundrl_launch_sample(const void* logits, int bf16, int64_t rows, int64_t vocab,
                           const float* temperature, const bool* greedy, const bool* banned,
                           const float* uniforms, int64_t* tokens, float* logprobs, void* stream) {
  if (rows == 0) return 0;
  if (vocab % 4) return (int)cudaErrorInvalidValue;
  auto s = (cudaStream_t)stream;
  if (bf16) {
    sample_rows<<<(unsigned)rows, kWarps * 32, 0, s>>>((const __nv_bfloat16*)logits, vocab, temperature,
                                                       greedy, banned, uniforms, tokens, logprobs);
  } else {
    sample_rows<<<(unsigned)rows, kWarps * 32, 0, s>>>((const float*)logits, vocab, temperature, greedy,
                                                       banned, uniforms, tokens, logprobs);
  }
  return (int)cudaGetLastError();
}

}  // extern "C"
