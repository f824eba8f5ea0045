// Decoding attention (flash-decoding) for grouped-query attention with head dim 128 and 8 query
// heads per KV head (the text models of Qwen2.5-VL 3B and 72B; fewer, as 7B's 7 and Qwen3-VL's 4, the
// caller pads with zero queries, fused.rs): one
// new query per row and query head over a static KV cache (rows, kv_heads, capacity, 128), with an
// additive mask (rows, capacity) and the step's column on the device (keys past it are neither read
// nor attended), so the launch keeps the same shapes every step and joins a captured CUDA graph.
//
// Why our own: libtorch's cuDNN attention reads the cache well below the card's bandwidth at batch 64, and
// this kernel much closer to it (`groundrl bench attention`; docs/performance.md). Each (row, KV head) may be
// split over several blocks (`splits`: about one block per SM in all), whose partial results a second kernel
// merges (with shared prompts, the per-row kernel folds in the prompt kernel's; see below).
//
// Each warp takes 16 keys at a time, copied to shared memory in whole cache lines (`cp.async`, the
// next two steps in flight while it works on the current one) and read from there in the layout of
// the tensor-core instruction `mma.sync.m16n8k16`:
// - scores S (16 x 8 keys) = Q (8 heads of one row, and either 8 zero rows or the 8 heads of a
//   second row) x K^T, over the 128 dims in 8 chunks; the dims are assigned to the instruction's k
//   slots in a permuted order (the same for Q and K, so the dot products are unchanged) that lets
//   each thread read 16 contiguous bytes at a time;
// - an online softmax per head in f32 (base 2), probabilities rounded to bf16 for the product, as
//   flash attention does;
// - O^T (128 dims x 8 heads) += V^T x P^T, whose B operand is exactly the score fragment, and whose
//   A operand is built from two keys' values with byte permutes.
// Sums run in f32 in their own order, so results differ from SDPA's in the last bits (the crate's CUDA
// test compares both with f32 attention).
//
// Shared prompts: a GRPO rollout decodes n samples of each prompt, whose cache rows hold the same
// prompt keys and values (one prefill per prompt). `decode_attention_prompt` reads a prompt's
// columns once for up to 8 of its rows (a block's warps, two rows each, reading the keys the block
// copies), from the prompt's first row and under that row's mask; the per-row kernel reads each
// row's own columns (on sm_90 GPUs while the prompt kernel runs) and folds the prompt's parts in.
// Reading each row's cache instead, 8 rows read the prompt 8 times: at 8 prompts x 8 samples and
// 1,262-token prompts, the prompt columns are most of the bytes a decoding step's attention reads.
// On sm_90 GPUs prompt_attention.cu's kernel (warp-group products) takes the prompt kernel's place.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "dependent_launch.cuh"
#include "hopper_launch.h"

namespace {

constexpr int kDim = 128;
constexpr int kGroups = 8;  // query heads per KV head
constexpr int kWarps = 4;
constexpr int kKeys = 16;  // keys per warp and iteration
constexpr float kLog2e = 1.4426950408889634f;

// One warp's 16 keys in registers: per thread, its key of each 8-key tile (4 x 16 bytes each, dims
// 32i + 8j .. + 8 for quad lane j), the values of keys 2j, 2j + 1, 8 + 2j, 9 + 2j (dims 8r .. 8r + 8
// and 64 + 8r .. 64 + 8r + 8 for r = lane / 4), and the mask of those four keys (log2 domain).
struct Tile {
  uint4 k[2][4];
  uint4 v[4][2];
  float mask[4];
};

// The same 16 keys in shared memory, copied by the warp with `cp.async` in 512-byte runs (whole cache lines
// per instruction: a first version that read scattered 16-byte pieces straight into the fragment layout ran
// no faster than cuDNN, with or without the arithmetic; docs/performance.md). Keys and values in 16-byte
// chunks, each key's chunks XOR-permuted (`swizzle`) so that the fragment reads of a quarter warp hit
// distinct banks; the 16 keys' mask values.
struct Stage {
  uint4 k[16][16];
  uint4 v[16][16];
  uint16_t mask[16];
};

// Chunk c of key `key` (0-15) is stored at chunk c ^ swizzle(key): consecutive keys differ in bit 2
// (the key fragment reads two keys' chunks 0-3 or 4-7 per quarter warp) and keys 2j + e (j = 0..3)
// in bits 1-2 (the value reads take chunk pairs of four such keys).
__device__ __forceinline__ int swizzle(int key) { return (((key >> 1) & 3) * 2) ^ ((key & 1) * 4); }

constexpr int kStages = 3;  // per warp: the current 16 keys and the next two in flight

__device__ __forceinline__ void copy_async(void* shared, const void* global) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(shared);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(global) : "memory");
}

__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void wait_pending() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t word(const uint4& x, int i) {
  return i == 0 ? x.x : i == 1 ? x.y : i == 2 ? x.z : x.w;
}

__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&p);
}

// Where a block reads its keys and values: one row's (rows, kv_heads) slice.
struct Source {
  const __nv_bfloat16 *keys, *values;
};

// Starts copying the 16 keys from `first` (a multiple of 8: the mask is copied 16 bytes, 8 columns,
// at a time, to an aligned address; the kernels' steps start at multiples of 16) into `st`: per instruction two keys' 256 bytes, lane l taking chunk l % 16 of key l / 16. Keys
// before `lowest` or at or past `end` are read at lowest or end - 1 (real keys, so no stale value,
// NaN included, reaches the product) and masked by the caller; so is a mask half past the capacity
// (read from the capacity's last 8 columns).
__device__ __forceinline__ void issue(Stage& st, const Source& src, const __nv_bfloat16* mask,
                                      int64_t first, int64_t lowest, int64_t end, int64_t capacity,
                                      int lane) {
  const int chunk = lane % 16;
#pragma unroll
  for (int m = 0; m < 8; ++m) {
    const int key = 2 * m + lane / 16;
    const int64_t at = min(max(first + key, lowest), end - 1) * kDim + 8 * chunk;
    const int slot = chunk ^ swizzle(key);
    copy_async(&st.k[key][slot], src.keys + at);
    copy_async(&st.v[key][slot], src.values + at);
  }
  if (lane < 2) copy_async(&st.mask[8 * lane], mask + min(first + 8 * lane, capacity - 8));
}

// The thread's part of a stage whose copies have landed (in the whole warp: see the caller).
__device__ __forceinline__ void read(Tile& t, const Stage& st, int lane) {
  const int r = lane / 4, j = lane % 4;
#pragma unroll
  for (int tile = 0; tile < 2; ++tile) {
    const int key = 8 * tile + r;
#pragma unroll
    for (int i = 0; i < 4; ++i) t.k[tile][i] = st.k[key][(4 * i + j) ^ swizzle(key)];
  }
#pragma unroll
  for (int n = 0; n < 4; ++n) {
    const int key = 8 * (n / 2) + 2 * j + n % 2;
    t.v[n][0] = st.v[key][r ^ swizzle(key)];
    t.v[n][1] = st.v[key][(8 + r) ^ swizzle(key)];
    t.mask[n] = __uint_as_float((uint32_t)st.mask[key] << 16) * kLog2e;
  }
}

// A warp's running softmax state for its quad's head r = lane / 4: maximum and (per-thread partial)
// sum in the log2 domain, and O^T for heads 2j, 2j + 1 (o[t][0..1]: dim base(t) = 64 (t / 4) + 8r +
// 2 (t % 4); o[t][2..3]: dim base(t) + 1).
struct State {
  float m = -INFINITY, l = 0.f;
  float o[8][4] = {};
};

// A row's query of head r (r = lane / 4 of the warp), in the same permuted k-slot order as the keys:
// chunk c's a operand halves (dims 2j.. and 2j + 8.. of the instruction's k slots).
__device__ __forceinline__ void load_query(uint32_t (&qa)[8][2], const __nv_bfloat16* q, int lane) {
  const int r = lane / 4, j = lane % 4;
  const uint4* qp = reinterpret_cast<const uint4*>(q + r * kDim + 8 * j);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // Through L2 (not the read-only cache): after the Hopper prompt kernel the per-row kernel reads
    // the query before its wait (see decode_attention_split), where what the rotation wrote is in L2.
    const uint4 x = __ldcg(qp + 4 * i);
    qa[2 * i][0] = x.x;
    qa[2 * i][1] = x.y;
    qa[2 * i + 1][0] = x.z;
    qa[2 * i + 1][1] = x.w;
  }
}

// Scores of keys first + {2j, 2j + 1, 8 + 2j, 9 + 2j} for head r: x[0] of the query `lo`, x[1] of
// `hi` (the instruction's rows 8-15; zero rows, and x[1] unused, without kPair).
template <bool kPair>
__device__ __forceinline__ void scores(float (&x)[2][4], const Tile& t, const uint32_t (&lo)[8][2],
                                       const uint32_t (&hi)[8][2]) {
#pragma unroll
  for (int tile = 0; tile < 2; ++tile) {
    float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int chunk = 0; chunk < 8; ++chunk) {
      const uint32_t a[4] = {lo[chunk][0], kPair ? hi[chunk][0] : 0u, lo[chunk][1],
                             kPair ? hi[chunk][1] : 0u};
      const uint4& k = t.k[tile][chunk / 2];
      mma(c, a, word(k, 2 * (chunk % 2)), word(k, 2 * (chunk % 2) + 1));
    }
    x[0][2 * tile] = c[0];
    x[0][2 * tile + 1] = c[1];
    x[1][2 * tile] = c[2];
    x[1][2 * tile + 1] = c[3];
  }
}

// One row's scores x of a tile's 16 keys (first + ...) folded into its state: masked outside
// [lowest, last), the online softmax, and O^T += V^T P^T.
__device__ __forceinline__ void update(State& s, float (&x)[4], const Tile& t, int64_t first,
                                       int64_t lowest, int64_t last, float scale_log2, int lane) {
  const int j = lane % 4;
  float mx = -INFINITY;
#pragma unroll
  for (int n = 0; n < 4; ++n) {
    const int64_t key = first + 8 * (n / 2) + 2 * j + n % 2;
    x[n] = key >= lowest && key < last ? x[n] * scale_log2 + t.mask[n] : -INFINITY;
    mx = fmaxf(mx, x[n]);
  }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float m = fmaxf(s.m, mx);
  const float base = m == -INFINITY ? 0.f : m;  // all masked so far: every weight is 0
  const float alpha = exp2f(s.m - base);
  float p[4];
#pragma unroll
  for (int n = 0; n < 4; ++n) p[n] = exp2f(x[n] - base);
  s.m = m;
  s.l = s.l * alpha + (p[0] + p[1]) + (p[2] + p[3]);
  // Rescale O^T's columns (heads 2j and 2j + 1) by their heads' factors.
  const float a0 = __shfl_sync(0xffffffffu, alpha, 8 * j);
  const float a1 = __shfl_sync(0xffffffffu, alpha, 8 * j + 4);
  const uint32_t b0 = pack(p[0], p[1]), b1 = pack(p[2], p[3]);
#pragma unroll
  for (int d = 0; d < 8; ++d) {
    s.o[d][0] *= a0;
    s.o[d][1] *= a1;
    s.o[d][2] *= a0;
    s.o[d][3] *= a1;
    const uint32_t w0 = word(t.v[0][d / 4], d % 4), w1 = word(t.v[1][d / 4], d % 4);
    const uint32_t w2 = word(t.v[2][d / 4], d % 4), w3 = word(t.v[3][d / 4], d % 4);
    const uint32_t a[4] = {__byte_perm(w0, w1, 0x5410), __byte_perm(w0, w1, 0x7632),
                           __byte_perm(w2, w3, 0x5410), __byte_perm(w2, w3, 0x7632)};
    mma(s.o[d], a, b0, b1);
  }
}

// Where a block's results go: `out` (bf16, like q), and the unnormalized outputs (f32, 128 dims),
// maxima and sums of `parts` parts per (row, query head), which `decode_attention_merge` (the
// per-row kernel's splits) or the per-row kernel's fold (the prompt kernel's) joins.
struct Parts {
  __nv_bfloat16* out;
  float *o, *ml;
  int parts;
};

// A warp's state for one row, summed over its quads, written as part `part` of the row's KV head
// `rh` (row * kv_heads + KV head): straight from the fragments, for the prompt kernel, whose warps
// each hold whole rows.
__device__ __forceinline__ void write_part(State& s, const Parts& dst, int64_t rh, int part, int lane) {
  const int r = lane / 4, j = lane % 4;
  s.l += __shfl_xor_sync(0xffffffffu, s.l, 1);
  s.l += __shfl_xor_sync(0xffffffffu, s.l, 2);
  if (j == 0) {
    const int64_t at = (rh * kGroups + r) * dst.parts + part;
    dst.ml[2 * at] = s.m;
    dst.ml[2 * at + 1] = s.l;
  }
#pragma unroll
  for (int c = 0; c < 2; ++c) {  // heads 2j + c
    float* o = dst.o + ((rh * kGroups + 2 * j + c) * dst.parts + part) * kDim;
#pragma unroll
    for (int d = 0; d < 8; ++d) {
      *reinterpret_cast<float2*>(o + 64 * (d / 4) + 8 * r + 2 * (d % 4)) =
          make_float2(s.o[d][c], s.o[d][c + 2]);
    }
  }
}

// A warp's shared memory in the per-row kernel: its pipeline's `depth` stages, whose space holds its
// final state once the loop is done (O for 8 heads x 128 dims, maxima and sums).
template <int depth>
struct WarpSpace {
  union {
    Stage stages[depth];
    struct {
      float o[kGroups][kDim];
      float m[kGroups], l[kGroups];
    } done;
  };
};

// The per-row kernel's stages a warp: kStages over a row's whole cache; after the prompt kernel, over
// a row's own columns (at most three of a warp's 16-key steps at 128 new tokens), two, so that a
// block's shared memory (65,792 bytes) fits on an SM beside a block of the Hopper prompt kernel: the
// per-row kernel's blocks, started during that kernel, read their rows' own columns beside its blocks
// instead of being placed only as those end (docs/performance.md, "the decoding attention's two
// kernels").
constexpr int kOwnStages = 2;

template <int depth>
constexpr int split_shared_bytes() {
  return kWarps * sizeof(WarpSpace<depth>);
}

// The largest of `parts` parts' maxima (`ml`: maximum and sum per part) and `m`.
__device__ __forceinline__ float parts_max(const float* ml, int parts, float m) {
  for (int p = 0; p < parts; ++p) m = fmaxf(m, ml[2 * p]);
  return m;
}

// `parts` parts' sums and N dims of their outputs (`o`: the first part's, the next kDim further)
// added to `l` and `acc`, each scaled by exp2(its maximum - base): the online softmax's merge.
template <int N>
__device__ __forceinline__ void add_parts(const float* ml, const float* o, int parts, float base,
                                          float& l, float (&acc)[N]) {
  for (int p = 0; p < parts; ++p) {
    const float e = exp2f(ml[2 * p] - base);
    if (e == 0.f) continue;  // an empty part (no key, or past the column): its output was not summed
    l += e * ml[2 * p + 1];
    const float4* v = reinterpret_cast<const float4*>(o + p * kDim);
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const float4 q = v[i];
      acc[4 * i] += e * q.x;
      acc[4 * i + 1] += e * q.y;
      acc[4 * i + 2] += e * q.z;
      acc[4 * i + 3] += e * q.w;
    }
  }
}

// One block per (split, KV head, row) over the row's columns from `begin` (none: 0) through the
// step's: its warps take turns over the split's 16-key steps (from `begin` rounded down to 16, the
// columns before it masked), each through its own pipeline of copies, then combine their states in
// shared memory. With `prompt_parts` (one split), the row's `dst.parts` parts the prompt kernel wrote
// are folded in and the output written; else part `split` of `dst`, or the output when `dst.parts`
// is 0.
template <int depth>
__global__ void __launch_bounds__(kWarps * 32)
decode_attention_split(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ keys,
                       const __nv_bfloat16* __restrict__ values, const __nv_bfloat16* __restrict__ mask,
                       const int64_t* __restrict__ column, const int64_t* __restrict__ begin,
                       Parts dst, bool prompt_parts, int64_t kv_heads, int64_t capacity,
                       float scale_log2) {
  extern __shared__ __align__(16) unsigned char shared[];
  WarpSpace<depth>* space = reinterpret_cast<WarpSpace<depth>*>(shared);
  const int splits = gridDim.x, split = blockIdx.x;
  const int64_t row = blockIdx.z, rh = row * kv_heads + blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t end = min(*column + 1, capacity), lowest = begin ? min(*begin, end) : 0;
  const int64_t from = lowest / kKeys * kKeys;
  const int64_t per = ((end - from + splits - 1) / splits + kKeys - 1) / kKeys * kKeys;
  const int64_t first = from + split * per, last = min(first + per, end);
  const Source src{keys + rh * capacity * kDim, values + rh * capacity * kDim};
  const __nv_bfloat16* mask_row = mask + row * capacity;

  // The warp's steps: keys at + k * stride for k < steps; the first depth - 1 set in flight.
  constexpr int64_t kStride = kWarps * kKeys;
  const int64_t at = first + warp * kKeys;
  const int64_t steps = at < last ? (last - at + kStride - 1) / kStride : 0;
  Stage* stages = space[warp].stages;
#pragma unroll
  for (int k = 0; k < depth - 1; ++k) {
    if (k < steps) issue(stages[k], src, mask_row, at + k * kStride, lowest, end, capacity, lane);
    commit();
  }
  uint32_t qa[8][2];
  load_query(qa, q + rh * kGroups * kDim, lane);
  State s;
  for (int64_t k = 0; k < steps; ++k) {
    wait_pending<depth - 2>();  // this lane's copies of step k have landed,
    __syncwarp();               // and so have every lane's
    Tile t;
    read(t, stages[k % depth], lane);
    const int64_t ahead = k + depth - 1;  // into the stage step k - 1 used
    if (ahead < steps) {
      issue(stages[ahead % depth], src, mask_row, at + ahead * kStride, lowest, end, capacity, lane);
    }
    commit();
    float x[2][4];
    scores<false>(x, t, qa, qa);
    update(s, x[0], t, at + k * kStride, lowest, last, scale_log2, lane);
  }
  wait_pending<0>();

  // The warp's sum over its quad, then the block's states combined.
  const int r = lane / 4, j = lane % 4;
  s.l += __shfl_xor_sync(0xffffffffu, s.l, 1);
  s.l += __shfl_xor_sync(0xffffffffu, s.l, 2);
  __syncwarp();  // every lane's stage reads done before the space is reused
  auto& done = space[warp].done;
  if (j == 0) {
    done.m[r] = s.m;
    done.l[r] = s.l;
  }
#pragma unroll
  for (int d = 0; d < 8; ++d) {
#pragma unroll
    for (int c = 0; c < 4; ++c) done.o[2 * j + c % 2][64 * (d / 4) + 8 * r + 2 * (d % 4) + c / 2] = s.o[d][c];
  }
  __syncthreads();
  // After the Hopper prompt kernel, launched to start once every block of it has waited for the
  // rotation (prompt_attention.cu): the row's columns and query, which the rotation wrote, were read
  // while that kernel ran; its parts only once it has ended.
  wait_prerequisites();
  allow_dependents();  // the output projection's kernel reads its weights meanwhile, this output after
  const int h = threadIdx.x / 16, d0 = 8 * (threadIdx.x % 16);  // 8 heads x 16 threads
  const int64_t head = rh * kGroups + h;
  const float* ml = dst.ml + 2 * head * dst.parts;  // with `prompt_parts`, the prompt's
  const int folded = prompt_parts ? dst.parts : 0;
  float m = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m = fmaxf(m, space[w].done.m[h]);
  m = parts_max(ml, folded, m);
  const float base = m == -INFINITY ? 0.f : m;
  float l = 0.f, acc[8] = {};
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const auto& done_w = space[w].done;
    const float e = exp2f(done_w.m[h] - base);
    l += e * done_w.l[h];
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] += e * done_w.o[h][d0 + i];
  }
  add_parts<8>(ml, dst.o + head * dst.parts * kDim + d0, folded, base, l, acc);
  if (prompt_parts || dst.parts == 0) {
    uint4 o;
    o.x = pack(acc[0] / l, acc[1] / l);
    o.y = pack(acc[2] / l, acc[3] / l);
    o.z = pack(acc[4] / l, acc[5] / l);
    o.w = pack(acc[6] / l, acc[7] / l);
    *reinterpret_cast<uint4*>(dst.out + head * kDim + d0) = o;
    return;
  }
  const int64_t part = head * dst.parts + split;
  float4* po = reinterpret_cast<float4*>(dst.o + part * kDim + d0);
  po[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  po[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
  if (d0 == 0) {
    dst.ml[2 * part] = m;
    dst.ml[2 * part + 1] = l;
  }
}

// The rows a prompt-kernel block serves: up to 8, two per warp pair (w, w + 4), whose warps split
// each stage's tiles.
constexpr int kChunk = 2 * kWarps;
constexpr int kPromptWarps = 2 * kWarps;

// The prompt kernel's shared memory: stages of kWarps tiles (64 keys), each tile copied by one warp
// of the first group and read by the warps of one group (tiles 0-1 by the first, 2-3 by the second).
struct BlockStage {
  Stage tiles[kWarps];
};

constexpr int kPromptSharedBytes = kStages * sizeof(BlockStage);

// A second-group warp's states of its two rows, as each lane holds them, for its first-group
// partner to fold in (in the stages' space once the loop is done).
struct Handover {
  float m[2], l[2], o[2][8][4];
};

static_assert(kWarps * 32 * sizeof(Handover) <= kPromptSharedBytes, "handover fits the stages");

// Folds another warp's state `b` of the same row, over other keys, into `a` (the same lane's): the
// online softmax's merge of two partial results, rescaled to their common maximum.
__device__ __forceinline__ void fold(State& a, float mb, float lb, const float (&ob)[8][4], int lane) {
  const int j = lane % 4;
  const float m = fmaxf(a.m, mb);
  const float base = m == -INFINITY ? 0.f : m;
  const float ea = exp2f(a.m - base), eb = exp2f(mb - base);
  a.m = m;
  a.l = a.l * ea + lb * eb;
  // O^T's columns are heads 2j and 2j + 1, whose factors lanes 8j and 8j + 4 hold.
  const float ea0 = __shfl_sync(0xffffffffu, ea, 8 * j), ea1 = __shfl_sync(0xffffffffu, ea, 8 * j + 4);
  const float eb0 = __shfl_sync(0xffffffffu, eb, 8 * j), eb1 = __shfl_sync(0xffffffffu, eb, 8 * j + 4);
#pragma unroll
  for (int d = 0; d < 8; ++d) {
    a.o[d][0] = a.o[d][0] * ea0 + ob[d][0] * eb0;
    a.o[d][1] = a.o[d][1] * ea1 + ob[d][1] * eb1;
    a.o[d][2] = a.o[d][2] * ea0 + ob[d][2] * eb0;
    a.o[d][3] = a.o[d][3] * ea1 + ob[d][3] * eb1;
  }
}

// Block (split, KV head, z) takes chunks z, z + gridDim.z, ... over the split's share of the prompt
// columns (gridDim.z: the chunks of 8 rows a batch of 8-sample prompts has; a batch of smaller groups
// has more chunks, which the same blocks take in turn): chunk c's rows are chunks[8c .. 8c + 8] (-1
// for none; a chunk of none ends the list), their keys, values and mask those of the first row's
// leader. Warps w and w + 4 attend for rows 2w and 2w + 1 (the instruction's two halves), each over
// half of every stage's tiles, and fold their states together at the end; part `split` of `dst`.
__global__ void __launch_bounds__(kPromptWarps * 32)
decode_attention_prompt(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ keys,
                        const __nv_bfloat16* __restrict__ values, const __nv_bfloat16* __restrict__ mask,
                        const int64_t* __restrict__ leader, const int64_t* __restrict__ chunks,
                        int64_t chunk_count, const int64_t* __restrict__ prompt_columns,
                        const int64_t* __restrict__ column, Parts dst, int64_t kv_heads,
                        int64_t capacity, float scale_log2) {
  extern __shared__ __align__(16) unsigned char shared[];
  BlockStage* stages = reinterpret_cast<BlockStage*>(shared);
  Handover* handover = reinterpret_cast<Handover*>(shared);
  const int splits = gridDim.x, split = blockIdx.x;
  const int64_t kv = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, pair = warp % kWarps, group = warp / kWarps;
  const int64_t end = min(min(*prompt_columns, *column + 1), capacity);
  constexpr int64_t kStageKeys = kWarps * kKeys;
  const int64_t per = ((end + splits - 1) / splits + kStageKeys - 1) / kStageKeys * kStageKeys;
  const int64_t first = split * per, last = min(first + per, end);
  const int64_t steps = first < last ? (last - first + kStageKeys - 1) / kStageKeys : 0;
  const int64_t tile_first = first + pair * kKeys;  // the tile of each stage a first-group warp copies
  for (int64_t chunk = blockIdx.z; chunk < chunk_count; chunk += gridDim.z) {
    const int64_t* rows = chunks + chunk * kChunk;
    if (rows[0] < 0) return;
    const int64_t source = leader[rows[0]], source_rh = source * kv_heads + kv;
    const Source src{keys + source_rh * capacity * kDim, values + source_rh * capacity * kDim};
    const __nv_bfloat16* mask_row = mask + source * capacity;
    __syncthreads();  // the previous chunk's stages and handover are read by every warp
#pragma unroll
    for (int k = 0; k < kStages - 1; ++k) {
      if (k < steps && group == 0) {
        issue(stages[k].tiles[pair], src, mask_row, tile_first + k * kStageKeys, 0, last, capacity, lane);
      }
      commit();
    }
    const int64_t lo = rows[2 * pair], hi = rows[2 * pair + 1];
    uint32_t qlo[8][2] = {}, qhi[8][2] = {};
    if (lo >= 0) load_query(qlo, q + (lo * kv_heads + kv) * kGroups * kDim, lane);
    if (hi >= 0) load_query(qhi, q + (hi * kv_heads + kv) * kGroups * kDim, lane);
    State s[2];
    for (int64_t k = 0; k < steps; ++k) {
      wait_pending<kStages - 2>();  // this thread's copies of stage k have landed,
      __syncthreads();              // every thread's have, and stage k - 1 is read by every warp
      const int64_t ahead = k + kStages - 1;
      if (ahead < steps && group == 0) {
        issue(stages[ahead % kStages].tiles[pair], src, mask_row, tile_first + ahead * kStageKeys, 0,
              last, capacity, lane);
      }
      commit();
      if (lo < 0) continue;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int tile = 2 * group + half;
        Tile t;
        read(t, stages[k % kStages].tiles[tile], lane);
        float x[2][4];
        scores<true>(x, t, qlo, qhi);
        const int64_t at = first + k * kStageKeys + tile * kKeys;
        update(s[0], x[0], t, at, 0, last, scale_log2, lane);
        update(s[1], x[1], t, at, 0, last, scale_log2, lane);
      }
    }
    wait_pending<0>();
    __syncthreads();  // every warp's reads of the stages done before the handover overwrites them
    Handover& h = handover[pair * 32 + lane];
    if (group == 1 && lo >= 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        h.m[r] = s[r].m;
        h.l[r] = s[r].l;
#pragma unroll
        for (int d = 0; d < 8; ++d) {
#pragma unroll
          for (int c = 0; c < 4; ++c) h.o[r][d][c] = s[r].o[d][c];
        }
      }
    }
    __syncthreads();
    if (group == 1 || lo < 0) continue;
#pragma unroll
    for (int r = 0; r < 2; ++r) fold(s[r], h.m[r], h.l[r], h.o[r], lane);
    write_part(s[0], dst, lo * kv_heads + kv, split, lane);
    if (hi >= 0) write_part(s[1], dst, hi * kv_heads + kv, split, lane);
  }
}

// The parts of each (row, query head) merged by their maxima and sums: one block per (row, KV head),
// one thread per (query head, 4 dims).
__global__ void __launch_bounds__(kGroups * 32)
decode_attention_merge(const float* __restrict__ part_o, const float* __restrict__ part_ml,
                       __nv_bfloat16* __restrict__ out, int parts) {
  const int h = threadIdx.x / 32, d0 = 4 * (threadIdx.x % 32);
  const int64_t head = blockIdx.x * (int64_t)kGroups + h;
  const float* ml = part_ml + 2 * head * parts;
  const float m = parts_max(ml, parts, -INFINITY);
  const float base = m == -INFINITY ? 0.f : m;
  float l = 0.f, acc[4] = {};
  add_parts<4>(ml, part_o + head * parts * kDim + d0, parts, base, l, acc);
  uint2 o;
  o.x = pack(acc[0] / l, acc[1] / l);
  o.y = pack(acc[2] / l, acc[3] / l);
  *reinterpret_cast<uint2*>(out + head * kDim + d0) = o;
}

// The prompt kernel's grid depth for `rows` rows: the chunks of 8 rows a batch of 8-sample prompts
// has (a batch of smaller groups has more chunks, which the same blocks take in turn).
int64_t prompt_grid_chunks(int64_t rows) { return (rows + kChunk - 1) / kChunk; }

}  // namespace

extern "C" {

// How many splits per (row, KV head): about one block per SM in all (one block per SM already reads
// near the bandwidth at batch 64, and more splits add the merge: `groundrl bench attention`),
// at most one per 64 columns of capacity (early in a call, splits past the column find no keys).
// With shared prompts (`grouped`), per (chunk, KV head) of the prompt kernel's grid instead.
int64_t groundrl_decode_attention_splits(int64_t rows, int64_t kv_heads, int64_t capacity,
                                         int grouped, int device) {
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return 1;
  const int64_t blocks = grouped ? prompt_grid_chunks(rows) : rows;
  const int64_t pairs = blocks * kv_heads, most = (capacity + 63) / 64;
  const int64_t splits = pairs > 0 ? sms / pairs : 1;
  return splits < 1 ? 1 : splits > most ? most : splits;
}

// The parts per (row, query head) a call writes for the merge or the fold: `splits` with shared
// prompts (the prompt kernel's) or with more than one split, else none (the output is written
// directly).
int64_t groundrl_decode_attention_parts(int grouped, int64_t splits) {
  return grouped || splits > 1 ? splits : 0;
}

// q (rows, kv_heads, 8, 128), keys and values (rows, kv_heads, capacity, 128), mask (rows, capacity),
// out like q: contiguous bf16; capacity a multiple of 8.
// Without `chunks`: `splits` blocks per (row, KV head); part_o holds rows * kv_heads * 8 * splits *
// 128 floats and part_ml rows * kv_heads * 8 * splits * 2 (unused with one split).
// With `chunks` (rows x 8 rows, -1 for none; see decode_attention_prompt), `leader` (each row's
// prompt's first row) and `prompt_columns` (one value): `splits` blocks per (chunk, KV head) over
// the prompt columns (prompt_attention.cu's kernel on sm_90 GPUs, *hopper = 1; else
// decode_attention_prompt), one per (row, KV head) over the rest, which folds the prompt's parts in;
// parts `splits` per row and query head.
int groundrl_launch_decode_attention(const void* q, const void* keys, const void* values,
                                     const void* mask, const int64_t* column, const int64_t* leader,
                                     const int64_t* chunks, const int64_t* prompt_columns, void* out,
                                     float* part_o, float* part_ml, int64_t rows, int64_t kv_heads,
                                     int64_t capacity, int64_t splits, float scale, void* stream,
                                     int* hopper) {
  if (rows * kv_heads == 0) return 0;
  auto s = (cudaStream_t)stream;
  // The per-row kernel: over each row's own columns after a prompt kernel, else over its whole cache.
  const auto split_kernel = chunks ? decode_attention_split<kOwnStages> : decode_attention_split<kStages>;
  const int split_bytes = chunks ? split_shared_bytes<kOwnStages>() : split_shared_bytes<kStages>();
  cudaError_t e = allow_shared(split_kernel, split_bytes);
  if (e == cudaSuccess && chunks) e = allow_shared(decode_attention_prompt, kPromptSharedBytes);
  if (e != cudaSuccess) return (int)e;
  const auto bf = [](const void* p) { return (const __nv_bfloat16*)p; };
  const float scale_log2 = scale * kLog2e;
  const int parts = (int)groundrl_decode_attention_parts(chunks != nullptr, splits);
  const Parts dst{(__nv_bfloat16*)out, part_o, part_ml, parts};
  *hopper = 0;
  if (chunks) {
    const int code = groundrl_launch_prompt_attention(q, keys, values, mask, leader, chunks,
                                                      prompt_columns, column, part_o, part_ml, rows,
                                                      kv_heads, capacity, splits, scale_log2, stream);
    if (code != kHopperUnsupported && code != 0) return code;
    *hopper = code == 0;
  }
  if (chunks && !*hopper) {
    const unsigned blocks = (unsigned)prompt_grid_chunks(rows);
    decode_attention_prompt<<<dim3((unsigned)splits, (unsigned)kv_heads, blocks), kPromptWarps * 32,
                              kPromptSharedBytes, s>>>(bf(q), bf(keys), bf(values), bf(mask), leader,
                                                       chunks, rows, prompt_columns, column, dst,
                                                       kv_heads, capacity, scale_log2);
  }
  const unsigned own = chunks ? 1 : (unsigned)splits;
  const dim3 grid(own, (unsigned)kv_heads, (unsigned)rows);
  const int64_t* begin = chunks ? prompt_columns : nullptr;
  if (*hopper) {  // after the Hopper prompt kernel, started during it
    e = launch_dependent(split_kernel, grid, dim3(kWarps * 32), split_bytes, s, bf(q), bf(keys), bf(values),
                         bf(mask), column, begin, dst, chunks != nullptr, kv_heads, capacity, scale_log2);
    if (e != cudaSuccess) return (int)e;
  } else {
    split_kernel<<<grid, kWarps * 32, split_bytes, s>>>(bf(q), bf(keys), bf(values), bf(mask), column, begin,
                                                        dst, chunks != nullptr, kv_heads, capacity,
                                                        scale_log2);
  }
  if (parts > 0 && !chunks) {
    decode_attention_merge<<<(unsigned)(rows * kv_heads), kGroups * 32, 0, s>>>(part_o, part_ml,
                                                                               (__nv_bfloat16*)out, parts);
  }
  return (int)cudaGetLastError();
}

}  // extern "C"
