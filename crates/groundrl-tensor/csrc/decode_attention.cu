// Decoding attention (flash-decoding) for grouped-query attention with head dim 128 and 8 query
// heads per KV head (the text models of Qwen2.5-VL 3B and 72B; 7B's 7 per KV head take SDPA): one
// new query per row and query head over a static KV cache (rows, kv_heads, capacity, 128), with an
// additive mask (rows, capacity) and the step's column on the device (keys past it are neither read
// nor attended), so the launch keeps the same shapes every step and joins a captured CUDA graph.
//
// Why our own: libtorch's cuDNN attention reads the cache well below the card's bandwidth at batch 64, and
// this kernel much closer to it (`groundrl bench attention`; docs/performance.md). Each (row, KV head) may be
// split over several blocks (`splits`: about one block per SM in all), whose partial results a second kernel
// merges.
//
// Each warp takes 16 keys at a time, copied to its own shared memory in whole cache lines
// (`cp.async`, the next two steps in flight while it works on the current one) and read from there
// in the layout of the tensor-core instruction `mma.sync.m16n8k16`:
// - scores S (16 x 8 keys) = Q (8 heads, padded to 16 rows) x K^T, over the 128 dims in 8 chunks;
//   the dims are assigned to the instruction's k slots in a permuted order (the same for Q and K, so
//   the dot products are unchanged) that lets each thread read 16 contiguous bytes at a time;
// - an online softmax per head in f32 (base 2), probabilities rounded to bf16 for the product, as
//   flash attention does;
// - O^T (128 dims x 8 heads) += V^T x P^T, whose B operand is exactly the score fragment, and whose
//   A operand is built from two keys' values with byte permutes.
// Sums run in f32 in their own order, so results differ from SDPA's in the last bits (the crate's CUDA
// test compares both with f32 attention).
//
// Shared prompts: a GRPO rollout decodes n samples of each prompt, whose cache rows hold the same
// prompt keys and values (one prefill per prompt, copied to each sample's row). Given each row's
// `leader` (the first row of its prompt) and the number of prompt columns, a block reads the prompt
// columns from its leader's row: the same values, so the same results to the bit, but the n rows'
// blocks, which run side by side, read the same addresses, and all but the first find them in L2
// instead of reading them from memory again.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

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

// Where a block reads its keys and values: its own row's (rows, kv_heads) slice, and its leader's for
// the `shared` prompt columns (the same slice when the row has no leader).
struct Source {
  const __nv_bfloat16 *keys, *values, *lead_keys, *lead_values;
  int64_t shared;
};

// Starts copying the 16 keys from `first` into `st`: per instruction two keys' 256 bytes, lane l
// taking chunk l % 16 of key l / 16. Keys at or past `end` are read at end - 1 (a real key, so no
// stale value reaches the product) and masked by the caller; so is a mask half past the capacity
// (read at `first` instead).
__device__ __forceinline__ void issue(Stage& st, const Source& src, const __nv_bfloat16* mask,
                                      int64_t first, int64_t end, int64_t capacity, int lane) {
  const int chunk = lane % 16;
#pragma unroll
  for (int m = 0; m < 8; ++m) {
    const int key = 2 * m + lane / 16;
    const int64_t column = min(first + key, end - 1);
    const bool lead = column < src.shared;
    const int64_t at = column * kDim + 8 * chunk;
    const int slot = chunk ^ swizzle(key);
    copy_async(&st.k[key][slot], (lead ? src.lead_keys : src.keys) + at);
    copy_async(&st.v[key][slot], (lead ? src.lead_values : src.values) + at);
  }
  if (lane < 2) {
    const int64_t from = first + 8 * lane < capacity ? first + 8 * lane : first;
    copy_async(&st.mask[8 * lane], mask + from);
  }
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

__device__ __forceinline__ void attend(State& s, const Tile& t, const uint32_t (&qa)[8][2],
                                       int64_t first, int64_t last, float scale_log2, int lane) {
  const int j = lane % 4;
  // Scores of keys first + {2j, 2j + 1, 8 + 2j, 9 + 2j} for head r.
  float x[4];
#pragma unroll
  for (int tile = 0; tile < 2; ++tile) {
    float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int chunk = 0; chunk < 8; ++chunk) {
      const uint32_t a[4] = {qa[chunk][0], 0u, qa[chunk][1], 0u};
      const uint4& k = t.k[tile][chunk / 2];
      mma(c, a, word(k, 2 * (chunk % 2)), word(k, 2 * (chunk % 2) + 1));
    }
    x[2 * tile] = c[0];
    x[2 * tile + 1] = c[1];
  }
  float mx = -INFINITY;
#pragma unroll
  for (int n = 0; n < 4; ++n) {
    const int64_t key = first + 8 * (n / 2) + 2 * j + n % 2;
    x[n] = key < last ? x[n] * scale_log2 + t.mask[n] : -INFINITY;
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

// A warp's shared memory: its pipeline's stages, whose space holds its final state once the loop is
// done (O for 8 heads x 128 dims, maxima and sums).
struct WarpSpace {
  union {
    Stage stages[kStages];
    struct {
      float o[kGroups][kDim];
      float m[kGroups], l[kGroups];
    } done;
  };
};

constexpr int kSharedBytes = kWarps * sizeof(WarpSpace);

// One block per (split, KV head, row): its warps take turns over the split's 16-key steps, each
// through its own pipeline of copies, then combine their states in shared memory. With one split it
// writes the output (bf16); with more, its unnormalized output, maximum and sum (f32) for
// `decode_attention_merge`.
__global__ void __launch_bounds__(kWarps * 32)
decode_attention_split(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ keys,
                       const __nv_bfloat16* __restrict__ values, const __nv_bfloat16* __restrict__ mask,
                       const int64_t* __restrict__ column, const int64_t* __restrict__ leader,
                       const int64_t* __restrict__ prompt_columns, __nv_bfloat16* __restrict__ out,
                       float* __restrict__ part_o, float* __restrict__ part_ml, int64_t kv_heads,
                       int64_t capacity, float scale_log2) {
  extern __shared__ __align__(16) unsigned char shared[];
  WarpSpace* space = reinterpret_cast<WarpSpace*>(shared);
  const int splits = gridDim.x, split = blockIdx.x;
  const int64_t row = blockIdx.z, rh = row * kv_heads + blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 4, j = lane % 4;
  const int64_t end = min(*column + 1, capacity);
  const int64_t per = ((end + splits - 1) / splits + kKeys - 1) / kKeys * kKeys;
  const int64_t first = split * per, last = min(first + per, end);
  const int64_t lead_rh = (leader ? leader[row] : row) * kv_heads + blockIdx.y;
  const Source src{keys + rh * capacity * kDim, values + rh * capacity * kDim,
                   keys + lead_rh * capacity * kDim, values + lead_rh * capacity * kDim,
                   leader ? *prompt_columns : 0};
  const __nv_bfloat16* mask_row = mask + row * capacity;

  // The warp's steps: keys at + k * stride for k < steps; the first kStages - 1 set in flight.
  constexpr int64_t kStride = kWarps * kKeys;
  const int64_t at = first + warp * kKeys;
  const int64_t steps = at < last ? (last - at + kStride - 1) / kStride : 0;
  Stage* stages = space[warp].stages;
#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) {
    if (k < steps) issue(stages[k], src, mask_row, at + k * kStride, end, capacity, lane);
    commit();
  }

  // The query of head r, in the same permuted k-slot order as the keys.
  uint32_t qa[8][2];
  const uint4* qp = reinterpret_cast<const uint4*>(q + (rh * kGroups + r) * kDim + 8 * j);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint4 x = qp[4 * i];
    qa[2 * i][0] = x.x;
    qa[2 * i][1] = x.y;
    qa[2 * i + 1][0] = x.z;
    qa[2 * i + 1][1] = x.w;
  }
  State s;
  for (int64_t k = 0; k < steps; ++k) {
    wait_pending<kStages - 2>();  // this lane's copies of step k have landed,
    __syncwarp();                 // and so have every lane's
    Tile t;
    read(t, stages[k % kStages], lane);
    const int64_t ahead = k + kStages - 1;  // into the stage step k - 1 used
    if (ahead < steps) {
      issue(stages[ahead % kStages], src, mask_row, at + ahead * kStride, end, capacity, lane);
    }
    commit();
    attend(s, t, qa, at + k * kStride, last, scale_log2, lane);
  }
  wait_pending<0>();

  // The warp's sum over its quad, then the block's states combined.
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
  const int h = threadIdx.x / 16, d0 = 8 * (threadIdx.x % 16);  // 8 heads x 16 threads
  float m = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m = fmaxf(m, space[w].done.m[h]);
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
  const int64_t head = rh * kGroups + h;
  if (splits == 1) {
    uint4 o;
    o.x = pack(acc[0] / l, acc[1] / l);
    o.y = pack(acc[2] / l, acc[3] / l);
    o.z = pack(acc[4] / l, acc[5] / l);
    o.w = pack(acc[6] / l, acc[7] / l);
    *reinterpret_cast<uint4*>(out + head * kDim + d0) = o;
    return;
  }
  const int64_t part = head * splits + split;
  float4* po = reinterpret_cast<float4*>(part_o + part * kDim + d0);
  po[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  po[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
  if (d0 == 0) {
    part_ml[2 * part] = m;
    part_ml[2 * part + 1] = l;
  }
}

// The splits of each (row, query head) merged by their maxima and sums: one block per (row, KV head),
// one thread per (query head, 4 dims).
__global__ void __launch_bounds__(kGroups * 32)
decode_attention_merge(const float* __restrict__ part_o, const float* __restrict__ part_ml,
                       __nv_bfloat16* __restrict__ out, int splits) {
  const int h = threadIdx.x / 32, d0 = 4 * (threadIdx.x % 32);
  const int64_t head = blockIdx.x * (int64_t)kGroups + h;
  const float* ml = part_ml + 2 * head * splits;
  float m = -INFINITY;
  for (int s = 0; s < splits; ++s) m = fmaxf(m, ml[2 * s]);
  const float base = m == -INFINITY ? 0.f : m;
  float l = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s = 0; s < splits; ++s) {
    const float e = exp2f(ml[2 * s] - base);
    if (e == 0.f) continue;  // an empty split (past the column): its output was not summed
    l += e * ml[2 * s + 1];
    const float4 o = *reinterpret_cast<const float4*>(part_o + (head * splits + s) * kDim + d0);
    acc.x += e * o.x;
    acc.y += e * o.y;
    acc.z += e * o.z;
    acc.w += e * o.w;
  }
  uint2 o;
  o.x = pack(acc.x / l, acc.y / l);
  o.y = pack(acc.z / l, acc.w / l);
  *reinterpret_cast<uint2*>(out + head * kDim + d0) = o;
}

}  // namespace

extern "C" {

// How many splits per (row, KV head): about one block per SM in all (one block per SM already reads
// near the bandwidth at batch 64, and more splits add the merge: `groundrl bench attention`),
// at most one per 64 columns of capacity (early in a call, splits past the column find no keys).
int64_t groundrl_decode_attention_splits(int64_t rows, int64_t kv_heads, int64_t capacity,
                                         int device) {
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return 1;
  const int64_t pairs = rows * kv_heads, most = (capacity + 63) / 64;
  const int64_t splits = pairs > 0 ? sms / pairs : 1;
  return splits < 1 ? 1 : splits > most ? most : splits;
}

// q (rows, kv_heads, 8, 128), keys and values (rows, kv_heads, capacity, 128), mask (rows, capacity),
// out like q: contiguous bf16; capacity a multiple of 8. part_o holds rows * kv_heads * 8 * splits *
// 128 floats and part_ml rows * kv_heads * 8 * splits * 2 (unused with one split). `leader` (rows)
// and `prompt_columns` (one value), both null or both set: each row's leader row and the prompt columns
// read from it (see the top of this file).
int groundrl_launch_decode_attention(const void* q, const void* keys, const void* values,
                                     const void* mask, const int64_t* column, const int64_t* leader,
                                     const int64_t* prompt_columns, void* out,
                                     float* part_o, float* part_ml, int64_t rows, int64_t kv_heads,
                                     int64_t capacity, int64_t splits, float scale, void* stream) {
  if (rows * kv_heads == 0) return 0;
  auto s = (cudaStream_t)stream;
  // Shared memory over the 48 KiB default must be asked for (a host-side setting, not in a graph).
  cudaError_t e = cudaFuncSetAttribute(decode_attention_split,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes);
  if (e != cudaSuccess) return (int)e;
  dim3 grid((unsigned)splits, (unsigned)kv_heads, (unsigned)rows);
  decode_attention_split<<<grid, kWarps * 32, kSharedBytes, s>>>(
      (const __nv_bfloat16*)q, (const __nv_bfloat16*)keys, (const __nv_bfloat16*)values,
      (const __nv_bfloat16*)mask, column, leader, prompt_columns, (__nv_bfloat16*)out, part_o, part_ml,
      kv_heads, capacity,
      scale * kLog2e);
  if (splits > 1) {
    decode_attention_merge<<<(unsigned)(rows * kv_heads), kGroups * 32, 0, s>>>(
        part_o, part_ml, (__nv_bfloat16*)out, (int)splits);
  }
  return (int)cudaGetLastError();
}

}  // extern "C"
