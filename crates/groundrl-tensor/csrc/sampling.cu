// Token selection for rows that do not filter by top-k or top-p (`rollout/sampling.rs`), in one
// kernel where libtorch's composition takes about 25 kernels per decoding step (full-vocabulary f32
// passes, timed in docs/performance.md: division, log-softmax, masking, softmax, padding, sums,
// scans). Per row, the same quantities:
// - scaled logits x / T (IEEE division, as the composition);
// - the token: the first maximum of the allowed (not banned) scaled logits for greedy rows; else an
//   inverse-CDF draw in token-id order, the first token whose cumulative weight exp(x - max) exceeds
//   u x the total, found in three levels (64 contiguous ranges, then 32 sub-ranges of the range
//   holding it, then within one sub-range) and held at the sub-range's last token of
//   non-zero weight when rounding puts the target past it;
// - its log-probability over the whole vocabulary, banned tokens included: x - max - log(sum exp).
// Sums run in this kernel's order (each lane over its places, then the lanes, then the warps), so a
// log-prob can differ from log_softmax's in the last f32 bits and a draw lying within rounding of a
// boundary can pick the neighbouring token (the crate's CUDA test compares with the composition).
//
// A row is read by one block of 1,024 threads, or by two (a cluster, `RowBlocks`) when the batch
// leaves more than half of the GPU's SMs idle otherwise; either way each warp reads whole ranges of
// the 64, four logits per lane at a time, three such loads in flight (with four, some values spill
// out of the 64 registers a thread of 1,024 has), so the sums and the draw are the same bit for bit.
// What held the kernel was each warp's chain of dependent steps and then the arithmetic on the SMs the
// rows occupy, not the loads (measurements 2026-11-30-sampler-blocks-h200, -sampler-loads-h200 and
// 2026-12-01-sampler-kernel-h200): the first pass keeps four independent running sums a lane, and the
// draw's pass shares its range among the 32 warps before one warp scans 1/32 of it. Logits in f32 or
// bf16 (converted exactly to f32).

#include <cooperative_groups.h>
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

// A row's temperature t with r = RN(1/t), for divisions by t that are the IEEE division without its
// branch: by Markstein's theorem, q = RN(x r), then e = x - q t (exact in one fma), then RN(q + e r)
// is RN(x / t) when nothing over- or underflows, which the ranges checked here rule out. libtorch's
// composition divides; `x / t` itself compiles to a branch into a slow path around each division,
// which kept a lane's four independent divisions and exponentials from overlapping.
struct Divisor {
  float t, r;
  bool unit;   // t = 1: x / t = x
  bool plain;  // t outside [2^-20, 2^20]: every division by `/`

  __device__ explicit Divisor(float t_)
      : t(t_), r(1.f / t_), unit(t_ == 1.f), plain(!(t_ >= 0x1p-20f && t_ <= 0x1p20f)) {}

  // x[k] / t for the four values, correctly rounded.
  __device__ __forceinline__ void divide(float (&x)[4]) const {
    if (unit) return;
    bool slow = plain;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float a = fabsf(x[k]);
      slow |= !(a < 0x1p100f) || (a != 0.f && a < 0x1p-100f);  // NaN and infinities included
    }
    if (slow) {
#pragma unroll
      for (int k = 0; k < 4; ++k) x[k] = x[k] / t;
      return;
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float q = x[k] * r;
      x[k] = fmaf(fmaf(-t, q, x[k]), r, q);
    }
  }
};

// The weight exp(x / t - max_allowed) of four tokens from i, 0 for banned ones.
template <class T>
__device__ __forceinline__ void weights(const T* x, const bool* banned, int64_t i, const Divisor& d,
                                        float max_allowed, float (&e)[4]) {
  const float4 v = four(x, i);
  float s[4] = {v.x, v.y, v.z, v.w};
  d.divide(s);
  const uchar4 ban = *reinterpret_cast<const uchar4*>(banned + i);
  const bool out[4] = {ban.x != 0, ban.y != 0, ban.z != 0, ban.w != 0};
#pragma unroll
  for (int k = 0; k < 4; ++k) e[k] = out[k] ? 0.f : expf(s[k] - max_allowed);
}

// A lane's first pass: the online softmax of its allowed scaled logits in one accumulator per
// place k of a four-token group (four independent chains of exponentials where one chain held every
// warp), the banned ones' in one more, and the first maximum of the allowed (in the lane's order,
// which is token order). A group takes one branch, when a running maximum grows (rarely, after the
// first groups): a branch per token and case held the kernel as much as the chain did.
struct LaneSums {
  float m[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, s[4] = {0.f, 0.f, 0.f, 0.f};
  Online banned;
  float best = -INFINITY;
  int64_t best_at;

  __device__ explicit LaneSums(int64_t none) : best_at(none) {}

  // The scaled logits x of tokens i to i + 3 and their banned flags.
  __device__ void add(const float (&x)[4], uchar4 ban, int64_t i) {
    const bool out[4] = {ban.x != 0, ban.y != 0, ban.z != 0, ban.w != 0};
    if (out[0] || out[1] || out[2] || out[3]) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if (out[k]) banned.add(x[k]);
      }
    }
    float a[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      a[k] = out[k] ? -INFINITY : x[k];
      if (a[k] > best) {
        best = a[k];
        best_at = i + k;
      }
    }
    if (a[0] > m[0] || a[1] > m[1] || a[2] > m[2] || a[3] > m[3]) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float grown = fmaxf(m[k], a[k]);
        s[k] *= expf(grown == m[k] ? 0.f : m[k] - grown);  // 0 x exp(-inf) = 0 for the first
        m[k] = grown;
      }
    }
    // exp(-inf) = 0 for banned tokens and -inf logits; the argument chosen, not the exponential, so
    // that no branch skips it.
#pragma unroll
    for (int k = 0; k < 4; ++k) s[k] += expf(a[k] == -INFINITY ? -INFINITY : a[k] - m[k]);
  }

  // The four places' sums as one.
  __device__ Online allowed() const {
    Online all;
#pragma unroll
    for (int k = 0; k < 4; ++k) all.merge(m[k], s[k]);
    return all;
  }
};

// Four-token groups a lane loads before it uses the first (pass 1).
constexpr int kInFlight = 3;

struct RowState {
  float raw_m, raw_s;   // all tokens
  float max_allowed;    // the largest allowed scaled logit
  float target;         // u x the allowed total, in units of exp(x - max_allowed)
  float before;         // the allowed weight of the ranges (later: sub-ranges) before the draw's
  int range;            // the warp range holding the draw
  int64_t first_max;    // the greedy token
};

// Of weights w[0..n) after `before`, the first with weight whose running total exceeds `target`
// (the last with weight when rounding puts the target past the total, -1 when none has weight);
// `before` becomes the total ahead of it.
__device__ int first_crossing(const float* w, int n, float target, float& before) {
  float run = before, before_last = before;
  int last_nonzero = -1;
  for (int j = 0; j < n; ++j) {
    if (w[j] > 0.f) {
      if (run + w[j] > target) {
        before = run;
        return j;
      }
      last_nonzero = j;
      before_last = run;
    }
    run += w[j];
  }
  before = before_last;
  return last_nonzero;
}

// Where a row's uniform comes from and its result goes: the sampler's own (rows,) vectors. An Out's
// `ahead(row)` loads what the row's draw and write read and no kernel of the step writes meanwhile,
// by one thread at the kernel's start: its warp waits for those loads (some one after another) while
// the block's other warps run the first pass, where the row's serial tail waited for them after it;
// `write(row, ahead, token, log-prob)` uses them. Measured on one H200
// (measurements/2026-12-03-sampler-ahead-h200): the kernel alone 1.3-1.6 us shorter at 64 rows, 2.1-2.2
// us at 256, than with those loads after the first pass.
struct RowOut {
  const float* uniforms;
  int64_t* tokens;
  float* logprobs;

  struct Ahead {
    float uniform;
  };
  __device__ Ahead ahead(int64_t row) const { return {uniforms[row]}; }
  __device__ void write(int64_t row, const Ahead&, int64_t token, float logprob) const {
    tokens[row] = token;
    logprobs[row] = logprob;
  }
};

// A decoding step's record (`rollout/session.rs`, `Decoding::select`): the uniform of step `*index`
// from the (rows, steps) table; the pad token and log-prob 0 for rows that had ended; both written at
// the step's column of the (rows, steps) tables and the token as the next step's input; the row ended
// after a stop id (stop_ids a row, -1 for none) or at its limit of new tokens.
struct StepOut {
  const float* uniforms;
  int64_t steps;
  const int64_t* index;
  bool* finished;
  const int64_t* stops;
  int64_t stop_ids;
  const int64_t* limits;
  int64_t pad;
  int64_t* table_tokens;
  float* table_logprobs;
  int64_t* next;

  struct Ahead {
    float uniform;
    int64_t step, limit;
    bool ended;
  };
  __device__ Ahead ahead(int64_t row) const {
    const int64_t step = *index;
    return {uniforms[row * steps + step], step, limits[row], finished[row]};
  }
  __device__ void write(int64_t row, const Ahead& a, int64_t token, float logprob) const {
    if (a.ended) {
      token = pad;
      logprob = 0.f;
    }
    table_tokens[row * steps + a.step] = token;
    table_logprobs[row * steps + a.step] = logprob;
    next[row] = token;
    bool stop = false;
    for (int64_t j = 0; j < stop_ids; ++j) stop |= stops[row * stop_ids + j] == token;
    finished[row] = a.ended || stop || a.limit <= a.step + 1;
  }
};

// A row's ranges of the vocabulary, each read by one warp in the first pass: twice as many as a block
// has warps, so that a row split over two blocks (`RowBlocks<2>`) and a row in one block (each warp
// reading two ranges) sum the same ranges in the same order, and draw the same token with the same
// log-prob bit for bit.
constexpr int kParts = 2;
constexpr int kRanges = kWarps * kParts;

// The blocks a row is read by: two on sm_90 and later GPUs when the batch has at most half as many
// rows as the GPU has SMs (`split_rows`), a thread-block cluster of two, each on its own SM, so that
// 64 rows work on 128 SMs instead of 64 (the first pass is bound by its arithmetic, not by the loads:
// measurement 2026-12-01-sampler-kernel-h200); one block otherwise. Each block's warps write their
// ranges' sums into the row's first block's shared memory (distributed shared memory), which goes on
// alone.
template <int kBlocks>
struct RowBlocks {
  // This block's place among its row's blocks.
  __device__ static int part() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (kBlocks > 1) return (int)cooperative_groups::this_cluster().block_rank();
#endif
    return 0;
  }

  // Marks this block started; `wait_started` returns once every block of the row has been.
  __device__ static void started() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (kBlocks > 1) asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#endif
  }

  __device__ static void wait_started() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (kBlocks > 1) asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
#endif
  }

  // `local` (an address of this block's shared memory) in the row's first block.
  template <class V>
  __device__ static V* in_first(V* local) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (kBlocks > 1) return cooperative_groups::this_cluster().map_shared_rank(local, 0);
#endif
    return local;
  }

  // Every block's writes into the first block's shared memory done and visible there.
  __device__ static void written() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (kBlocks > 1) {
      asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
      asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
      return;
    }
#endif
    __syncthreads();
  }
};

// One range's first pass, as every lane of its warp holds it after the warp's reduction.
struct RangeSums {
  Online allowed, raw;  // the allowed scaled logits; all of them, banned ones included
  float best;           // the first maximum of the allowed ones, and where
  int64_t best_at;
};

// Pass 1 over tokens [begin, end) by one warp: the online softmax of its allowed and of its banned
// scaled logits, and the first maximum of the allowed ones.
template <class T>
__device__ __forceinline__ RangeSums range_sums(const T* x, const bool* banned, const Divisor& divisor,
                                                int64_t begin, int64_t end, int64_t vocab, int lane) {
  LaneSums sums(vocab);
  for (int64_t c = begin + 4 * lane; c < end; c += 128 * kInFlight) {
    float4 v[kInFlight];
    uchar4 ban[kInFlight];
#pragma unroll
    for (int g = 0; g < kInFlight; ++g) {
      if (c + 128 * g < end) {
        v[g] = four(x, c + 128 * g);
        ban[g] = *reinterpret_cast<const uchar4*>(banned + c + 128 * g);
      }
    }
#pragma unroll
    for (int g = 0; g < kInFlight; ++g) {
      if (c + 128 * g < end) {
        float s[4] = {v[g].x, v[g].y, v[g].z, v[g].w};
        divisor.divide(s);
        sums.add(s, ban[g], c + 128 * g);
      }
    }
  }
  RangeSums r{sums.allowed(), {}, sums.best, sums.best_at};
  Online banned_part = sums.banned;
  r.allowed.merge_warp();
  banned_part.merge_warp();
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    keep_first_max(r.best, r.best_at, __shfl_xor_sync(kAll, r.best, o),
                   __shfl_xor_sync(kAll, r.best_at, o));
  }
  r.raw = r.allowed;
  r.raw.merge(banned_part.m, banned_part.s);
  return r;
}

template <class T, class Out, int kBlocks>
__global__ void __launch_bounds__(kWarps * 32)
sample_rows(const T* __restrict__ logits, int64_t vocab, const float* __restrict__ temperature,
            const bool* __restrict__ greedy, const bool* __restrict__ banned,
            Out out) {
  using Blocks = RowBlocks<kBlocks>;
  // A warp's ranges: part x 32 + warp, and in a row's only block also 32 + warp.
  constexpr int kOwn = kParts / kBlocks;
  __shared__ float allowed_m[kRanges], allowed_s[kRanges], raw_m[kRanges], raw_s[kRanges];
  __shared__ float best_v[kRanges], weight[kRanges];
  __shared__ int64_t best_i[kRanges];
  __shared__ RowState row_state;
  __shared__ typename Out::Ahead ahead;
  Blocks::started();
  const int part = Blocks::part();
  const int64_t row = blockIdx.x / kBlocks;
  // Seen by every thread of the row's first block after the barrier that ends its row totals.
  if (part == 0 && threadIdx.x == 0) ahead = out.ahead(row);
  const T* x = logits + row * vocab;
  const float t = temperature[row];
  const Divisor divisor(t);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t span = ((vocab + kRanges - 1) / kRanges + 3) / 4 * 4;

  // Pass 1, per range; each range's sums written before the next range's are taken (they would not
  // fit in the registers beside it).
  for (int k = 0; k < kOwn; ++k) {
    const int i = (part + k) * kWarps + warp;
    const int64_t begin = min(i * span, vocab);
    const RangeSums sums = range_sums(x, banned, divisor, begin, min(begin + span, vocab), vocab, lane);
    if (k == kOwn - 1) Blocks::wait_started();
    if (lane == 0) {
      Blocks::in_first(allowed_m)[i] = sums.allowed.m;
      Blocks::in_first(allowed_s)[i] = sums.allowed.s;
      Blocks::in_first(raw_m)[i] = sums.raw.m;
      Blocks::in_first(raw_s)[i] = sums.raw.s;
      Blocks::in_first(best_v)[i] = sums.best;
      Blocks::in_first(best_i)[i] = sums.best_at;
    }
  }
  Blocks::written();
  if (part != 0) return;

  // The row's totals: the sums of all tokens, the largest allowed logit and each range's allowed
  // weight by the first warp (each lane over the ranges lane and 32 + lane, the exponentials side by
  // side); the first maximum and the range of the draw by one thread over the ranges in order.
  if (warp == 0) {
    Online raw;
    float max_allowed = -INFINITY;
    for (int i = lane; i < kRanges; i += 32) {
      raw.merge(raw_m[i], raw_s[i]);
      max_allowed = fmaxf(max_allowed, allowed_m[i]);
    }
    raw.merge_warp();
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
      max_allowed = fmaxf(max_allowed, __shfl_xor_sync(kAll, max_allowed, o));
    }
    for (int i = lane; i < kRanges; i += 32) {
      weight[i] = allowed_m[i] == -INFINITY ? 0.f : allowed_s[i] * expf(allowed_m[i] - max_allowed);
    }
    __syncwarp();
    if (lane == 0) {
      float top = -INFINITY, total = 0.f;
      int64_t top_at = vocab;
      for (int i = 0; i < kRanges; ++i) {
        keep_first_max(top, top_at, best_v[i], best_i[i]);
        total += weight[i];
      }
      const float target = ahead.uniform * total;
      float before = 0.f;
      // No range with weight: the draw falls back to the first maximum (`finish`).
      const int range = first_crossing(weight, kRanges, target, before);
      row_state = RowState{raw.m, raw.s, max_allowed, target, before, range, top_at};
    }
  }
  __syncthreads();
  const RowState st = row_state;
  const auto finish = [&](int64_t token) {
    // No token is left only when no token has weight (all banned, or NaN logits): the first
    // maximum then, else 0.
    if (token < 0 || token >= vocab) token = st.first_max < vocab ? st.first_max : 0;
    out.write(row, ahead, token, (one(x, token) / t - st.raw_m) - logf(st.raw_s));
  };
  if (greedy[row] || st.range < 0) {
    if (threadIdx.x == 0) finish(greedy[row] ? st.first_max : -1);
    return;
  }

  // Pass 2a: the draw's range in 32 sub-ranges, one a warp, each one's weight; then the sub-range
  // of the draw, as the range was found.
  __shared__ float sub_weight[kWarps];
  __shared__ int draw_sub;
  __shared__ float draw_before;
  const int64_t range_begin = min(st.range * span, vocab), range_end = min(range_begin + span, vocab);
  const int64_t sub_span = ((range_end - range_begin + kWarps - 1) / kWarps + 3) / 4 * 4;
  const int64_t sub_begin = min(range_begin + warp * sub_span, range_end);
  const int64_t sub_end = min(sub_begin + sub_span, range_end);
  float sub_sum = 0.f;
  for (int64_t i = sub_begin + 4 * lane; i < sub_end; i += 128) {
    float e[4];
    weights(x, banned, i, divisor, st.max_allowed, e);
    sub_sum += (e[0] + e[1]) + (e[2] + e[3]);
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) sub_sum += __shfl_xor_sync(kAll, sub_sum, o);
  if (lane == 0) sub_weight[warp] = sub_sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float before = st.before;
    draw_sub = first_crossing(sub_weight, kWarps, st.target, before);
    draw_before = before;
  }
  __syncthreads();
  if (draw_sub < 0) {  // rounding left the range's tokens no weight here
    if (threadIdx.x == 0) finish(-1);
    return;
  }
  if (warp != draw_sub) return;

  // Pass 2b, one warp: the cumulative weight through its sub-range, 128 tokens at a time, until it
  // exceeds the target.
  float run = draw_before;
  int64_t last_drawable = -1;
  for (int64_t c = sub_begin; c < sub_end; c += 128) {
    const int64_t i = c + 4 * lane;
    float e[4] = {0.f, 0.f, 0.f, 0.f};
    if (i < sub_end) weights(x, banned, i, divisor, st.max_allowed, e);
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

// Whether the current device's rows are split over two blocks (`RowBlocks`): an sm_90 or later GPU
// with at least twice as many SMs as there are rows. Two blocks a row on more rows measured slower (256
// rows: 129.6 us against 92.7 us in one block a row), as the two blocks of a cluster must be
// placed together.
static bool split_rows(int64_t rows) {
  int device = 0, major = 0, sms = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess &&
         major >= 9 && kParts * rows <= sms;
}

template <class T, class Out>
cudaError_t launch_typed(const T* logits, int64_t rows, int64_t vocab, const float* temperature,
                         const bool* greedy, const bool* banned, Out out, cudaStream_t stream) {
  if (split_rows(rows)) {
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = kParts;
    attribute[0].val.clusterDim.y = 1;
    attribute[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3((unsigned)(kParts * rows));
    config.blockDim = dim3(kWarps * 32);
    config.stream = stream;
    config.attrs = attribute;
    config.numAttrs = 1;
    return cudaLaunchKernelEx(&config, sample_rows<T, Out, kParts>, logits, vocab, temperature, greedy,
                              banned, out);
  }
  sample_rows<T, Out, 1><<<(unsigned)rows, kWarps * 32, 0, stream>>>(logits, vocab, temperature, greedy,
                                                                     banned, out);
  return cudaGetLastError();
}

// Logits in f32 or bf16.
template <class Out>
int launch_rows(const void* logits, int bf16, int64_t rows, int64_t vocab, const float* temperature,
                const bool* greedy, const bool* banned, Out out, void* stream) {
  if (rows == 0) return 0;
  if (vocab % 4) return (int)cudaErrorInvalidValue;
  auto s = (cudaStream_t)stream;
  if (bf16) {
    return (int)launch_typed((const __nv_bfloat16*)logits, rows, vocab, temperature, greedy, banned, out,
                             s);
  }
  return (int)launch_typed((const float*)logits, rows, vocab, temperature, greedy, banned, out, s);
}

extern "C" {

// logits (rows, vocab) contiguous, f32 (`bf16` 0) or bf16 (1), vocab a multiple of 4; temperature,
// uniforms (rows,) f32; greedy (rows,) bool; banned (vocab,) bool; writes tokens (rows,) int64 and
// logprobs (rows,) f32.
int groundrl_launch_sample(const void* logits, int bf16, int64_t rows, int64_t vocab,
                           const float* temperature, const bool* greedy, const bool* banned,
                           const float* uniforms, int64_t* tokens, float* logprobs, void* stream) {
  return launch_rows(logits, bf16, rows, vocab, temperature, greedy, banned,
                     RowOut{uniforms, tokens, logprobs}, stream);
}

// As groundrl_launch_sample, for step *index of a decoding step's record (StepOut): uniforms,
// table_tokens, table_logprobs (rows, steps); finished (rows,) bool, read and updated; stops (rows,
// stop_ids) int64; limits (rows,) int64; writes next (rows,) int64.
int groundrl_launch_select(const void* logits, int bf16, int64_t rows, int64_t vocab,
                           const float* temperature, const bool* greedy, const bool* banned,
                           const float* uniforms, int64_t steps, const int64_t* index, bool* finished,
                           const int64_t* stops, int64_t stop_ids, const int64_t* limits, int64_t pad,
                           int64_t* table_tokens, float* table_logprobs, int64_t* next,
                           void* stream) {
  const StepOut out{uniforms, steps, index, finished, stops, stop_ids, limits, pad,
                    table_tokens, table_logprobs, next};
  return launch_rows(logits, bf16, rows, vocab, temperature, greedy, banned, out, stream);
}

}  // extern "C"
