// Decoding attention over the shared prompt columns on Hopper GPUs (see decode_attention.cu, whose
// prompt kernel this one replaces on sm_90): the 8 query heads of up to 8 rows of one prompt are
// exactly the 64 rows of `wgmma`'s m, so one block per (split, KV head, chunk of rows) computes the
// scores of 64 keys a stage as one 64 x 64 product (`wgmma.m64n64k16`, the queries and keys from
// shared memory) and adds P V as one 64 x 128 product (`wgmma.m64n128k16`, the probabilities from
// registers, the values from shared memory, transposed), as FlashAttention-3 does (Shah et al. 2024,
// arXiv:2407.08608). The `mma.sync` kernel it replaces runs 16 keys a warp through a dependent chain of
// eight instructions and its softmax's shuffles; here a warp group waits once a stage on each product.
//
// A fifth warp copies the chunk's queries (16 tensor-map copies of 8 heads x 64 dims) and each
// stage's keys and values (64 keys x 2 x 64 dims each) into shared memory with the copy engine, four
// stages in flight, from the prompt's first row (its leader) as the mma.sync kernel does. Keys past the
// split's last column are copied too (the cache's next columns, or zeros past the tensor) and never
// weighted: their scores become -inf by a select, and the values' rows are zeroed before the product, so
// that nothing stale (NaN included) reaches it. The online softmax runs in f32 in the log2 domain,
// probabilities rounded to bf16 for the product, and each (row, query head) gets its split's part
// (unnormalized output, maximum, sum) in the layout the per-row kernel folds in.
//
// Launched to start while the step's rotation runs (dependent_launch.cuh): the first two stages of
// prompt keys and values, which that kernel does not write, are copied before waiting for it, the
// queries it writes after. A block lets the per-row kernel after this one start once it has waited:
// when all have, the rotation has ended, and that kernel's blocks read what the rotation wrote (the
// queries, each row's own columns) while this kernel runs, and wait for it only before folding its
// parts in.
//
// Built for sm_90a only; the launcher answers kHopperUnsupported elsewhere and the caller launches the
// mma.sync kernel.

#include "dependent_launch.cuh"
#include "hopper.cuh"

namespace {

using namespace hopper;

constexpr int kDim = 128;
constexpr int kGroups = 8;                // query heads per KV head
constexpr int kChunkRows = 8;             // rows of one prompt a block serves: 8 x 8 heads = wgmma's m
constexpr int kKeys = 64;                 // keys a stage
constexpr int kTileBytes = 64 * 128;      // 64 rows of 64 dims: one swizzled tile, 8 KiB
constexpr int kQueryBoxBytes = 8 * 128;   // a row's 8 heads of 64 dims
constexpr int kStageBytes = 4 * kTileBytes;  // keys, then values, each dims 0-63 and 64-127
constexpr int kStages = 4;
// Stages of keys and values copied before the wait for the rotation (copy_chunks). The queries, copied
// after it, land behind every copy in flight, and no stage's product starts before they have: with
// four stages a block saw its queries 2.7 us after its wait; with two the kernel ended 0.35 and 0.45
// us sooner in two runs (measurements/2026-12-02-qkv-split-h200).
constexpr int kEarlyStages = 2;
constexpr int kWarps = 4;  // the warp group that computes; warp 4 copies
constexpr int kThreads = (kWarps + 1) * 32;
constexpr int kSharedBytes = 2 * kTileBytes + kStages * kStageBytes + 1024;  // + the alignment
constexpr float kLog2e = 1.4426950408889634f;

// d += p (64 x 16 keys, bf16 in registers as wgmma's A fragment) @ v (16 keys x 128 dims, at b, whose
// rows hold the dims: transposed), 64 f32 a thread.
__device__ __forceinline__ void mma_values(float (&d)[64], const uint32_t (&p)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "r"(p[0]), "r"(p[1]), "r"(p[2]), "r"(p[3]), "l"(b), "n"(1));
}

__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&p);
}

// The block's barriers: a stage's copies landed (`full`) and its products done (`empty`, one arrival
// a warp), the chunk's queries landed and their last product done.
struct Barriers {
  uint64_t full[kStages], empty[kStages], query_full, query_empty;
};

// Where a block reads and writes: its split's columns [first, last) of the prompt, the shared memory's
// queries and stages, and the parts (unnormalized outputs, maxima and sums per (row, query head),
// `parts` of each) the per-row kernel folds in.
struct Work {
  const int64_t *leader, *chunks;
  int64_t chunk_count, capacity, first, last;
  int kv_heads, kv, steps;
  uint32_t queries, stages;
  float *part_o, *part_ml;
};

// Stage i of a chunk (the block's g-th over all chunks): keys and values of its 64 columns from
// `source` (the leader's row of the KV head) into the next free buffer.
__device__ __forceinline__ void copy_stage(const Work& w, const CUtensorMap* k_map, const CUtensorMap* v_map,
                                           Barriers& b, int64_t source, int i, int g) {
  const int slot = g % kStages;
  if (g >= kStages) barrier_wait(shared_address(&b.empty[slot]), (g / kStages - 1) & 1);
  const uint32_t bar = shared_address(&b.full[slot]), stage = w.stages + slot * kStageBytes;
  const int key_row = (int)(source + i * kKeys);
  expect_bytes(bar, kStageBytes);
  copy_tile(stage, k_map, 0, key_row, bar);
  copy_tile(stage + kTileBytes, k_map, 64, key_row, bar);
  copy_tile(stage + 2 * kTileBytes, v_map, 0, key_row, bar);
  copy_tile(stage + 3 * kTileBytes, v_map, 64, key_row, bar);
}

// The leader's row of the KV head for a chunk's rows, from the split's first column.
__device__ __forceinline__ int64_t chunk_source(const Work& w, const int64_t* rows) {
  return (w.leader[rows[0]] * w.kv_heads + w.kv) * w.capacity + w.first;
}

// The copy warp's lane 0: every chunk's queries, then its stages, each into the next free buffer.
// The first chunk's first kEarlyStages stages whose columns all lie before the step's `column` are
// copied before waiting for the kernel before this one (the decoding step's rotation, which writes
// the queries and that column: dependent_launch.cuh), the rest after.
__device__ void copy_chunks(const Work& w, const CUtensorMap* q_map, const CUtensorMap* k_map,
                            const CUtensorMap* v_map, Barriers& b, int64_t column) {
  int early = 0;
  if (blockIdx.z < w.chunk_count && w.chunks[blockIdx.z * kChunkRows] >= 0) {
    const int64_t source = chunk_source(w, w.chunks + blockIdx.z * kChunkRows);
    for (; early < w.steps && early < kEarlyStages && w.first + (early + 1) * kKeys <= column; ++early) {
      copy_stage(w, k_map, v_map, b, source, early, early);
    }
  }
  wait_prerequisites();
  allow_dependents();  // the rotation has ended (see above)
  int g = early;  // stages copied so far, over all chunks
  for (int64_t chunk = blockIdx.z, n = 0; chunk < w.chunk_count; chunk += gridDim.z, ++n) {
    const int64_t* rows = w.chunks + chunk * kChunkRows;
    if (rows[0] < 0) return;
    if (n > 0) barrier_wait(shared_address(&b.query_empty), (n - 1) & 1);
    int present = 0;
    for (int s = 0; s < kChunkRows; ++s) present += rows[s] >= 0;
    const uint32_t query_bar = shared_address(&b.query_full);
    expect_bytes(query_bar, present * 2 * kQueryBoxBytes);
    for (int s = 0; s < kChunkRows; ++s) {
      if (rows[s] < 0) continue;
      const int head_row = (int)((rows[s] * w.kv_heads + w.kv) * kGroups);
      copy_tile(w.queries + s * kQueryBoxBytes, q_map, 0, head_row, query_bar);
      copy_tile(w.queries + kTileBytes + s * kQueryBoxBytes, q_map, 64, head_row, query_bar);
    }
    const int64_t source = chunk_source(w, rows);
    for (int i = n == 0 ? early : 0; i < w.steps; ++i, ++g) copy_stage(w, k_map, v_map, b, source, i, g);
  }
}

// The thread's 16 keys of a stage (key0 + 8 j + 2 (lane % 4) + e, e = 0, 1): their mask values (0
// past the split's last column), read a stage ahead of their use (see attend_chunks).
struct MaskPairs {
  __nv_bfloat162 m[8];
};

__device__ __forceinline__ MaskPairs load_mask(const bf16* mask_row, int64_t key0, int64_t last, int lane) {
  MaskPairs pairs;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int64_t key = key0 + 8 * j + 2 * (lane % 4);  // even: the pair is 4-byte aligned
    pairs.m[j] = __floats2bfloat162_rn(0.f, 0.f);
    if (key < last) pairs.m[j] = *reinterpret_cast<const __nv_bfloat162*>(mask_row + key);
  }
  return pairs;
}

// Those keys' mask in the log2 domain, -inf past the split's last column.
__device__ __forceinline__ void load_bias(float (&bias)[16], const MaskPairs& pairs, int64_t key0,
                                          int64_t last, int lane) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int64_t key = key0 + 8 * j + 2 * (lane % 4);
    bias[2 * j] = key < last ? __bfloat162float(pairs.m[j].x) * kLog2e : -INFINITY;
    bias[2 * j + 1] = key + 1 < last ? __bfloat162float(pairs.m[j].y) * kLog2e : -INFINITY;
  }
}

// The warp group's running softmax: a thread holds rows 16 warp + lane / 4 + 8 h (h = 0, 1: the
// chunk's row 2 warp + h, query head lane / 4): their maxima and (per-thread partial) sums in the log2
// domain, and their unnormalized outputs o[4 j + 2 h + e] at dims 8 j + 2 (lane % 4) + e.
struct State {
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float o[64] = {};
};

// A stage's scores s (s[4 j + 2 h + e]: row h's key 8 j + 2 (lane % 4) + e) into probabilities,
// in place, and the state rescaled to the new maxima.
__device__ __forceinline__ void softmax(State& st, float (&s)[32], const float (&bias)[16],
                                        float scale_log2) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float x[16], mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const float score = s[4 * (k / 2) + 2 * h + k % 2];
      // A select, not a sum: a key past the split may hold anything, NaN included.
      x[k] = bias[k] == -INFINITY ? -INFINITY : fmaf(score, scale_log2, bias[k]);
      mx = fmaxf(mx, x[k]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m = fmaxf(st.m[h], mx);
    const float base = m == -INFINITY ? 0.f : m;  // all masked so far: every weight is 0
    const float alpha = exp2f(st.m[h] - base);
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const float p = exp2f(x[k] - base);
      s[4 * (k / 2) + 2 * h + k % 2] = p;
      sum += p;
    }
    st.m[h] = m;
    st.l[h] = st.l[h] * alpha + sum;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      st.o[4 * j + 2 * h] *= alpha;
      st.o[4 * j + 2 * h + 1] *= alpha;
    }
  }
}

// Rows `from` .. 63 of a stage's values (both 64-dim tiles) set to zero, then made visible to the
// products (the async proxy) and to the whole warp group.
__device__ __forceinline__ void zero_values(unsigned char* values, int from) {
  for (int i = threadIdx.x; i < (kKeys - from) * 16; i += kWarps * 32) {
    const int row = from + i / 16, tile = (i / 8) % 2, chunk = i % 8;
    *reinterpret_cast<uint4*>(values + tile * kTileBytes + row * 128 + chunk * 16) =
        make_uint4(0u, 0u, 0u, 0u);
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  asm volatile("bar.sync 1, %0;\n" ::"n"(kWarps * 32) : "memory");
}

// One stage of 64 keys: scores, softmax, P V. `stage` and `generic` are its shared-memory address
// and pointer.
__device__ __forceinline__ void attend_stage(State& st, const Work& w, uint32_t stage,
                                             unsigned char* generic, int64_t key0,
                                             const float (&bias)[16], float scale_log2) {
  float s[32];
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < kDim / 16; ++k) {  // 16 dims (32 bytes of a swizzled row) an instruction
    const uint32_t offset = (k / 4) * kTileBytes + (k % 4) * 32;
    mma_64x64(s, descriptor(w.queries + offset), descriptor(stage + offset), k > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_operands(s);
  softmax(st, s, bias, scale_log2);
  if (key0 + kKeys > w.last) zero_values(generic + 2 * kTileBytes, (int)(w.last - key0));
  uint32_t p[kKeys / 16][4];  // all packed before the first product: registers the warp group's
                              // products read are written before its fence, not between them
#pragma unroll
  for (int t = 0; t < kKeys / 16; ++t) {
#pragma unroll
    for (int r = 0; r < 4; ++r) p[t][r] = pack(s[8 * t + 2 * r], s[8 * t + 2 * r + 1]);
  }
  wgmma_fence();
#pragma unroll
  for (int t = 0; t < kKeys / 16; ++t) {  // 16 keys (2 groups of 8 swizzled rows) an instruction
    mma_values(st.o, p[t], descriptor(stage + 2 * kTileBytes + t * 2048, kTileBytes));
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_operands(st.o);
}

// The state's rows, summed over their quads, written as part `blockIdx.x` of each row present.
__device__ __forceinline__ void write_parts(State& st, const Work& w, const int64_t* rows) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, head = lane / 4, q = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    st.l[h] += __shfl_xor_sync(0xffffffffu, st.l[h], 1);
    st.l[h] += __shfl_xor_sync(0xffffffffu, st.l[h], 2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = rows[2 * warp + h];
    if (row < 0) continue;
    const int64_t at = ((row * w.kv_heads + w.kv) * kGroups + head) * gridDim.x + blockIdx.x;
    float* o = w.part_o + at * kDim;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      *reinterpret_cast<float2*>(o + 8 * j + 2 * q) = make_float2(st.o[4 * j + 2 * h], st.o[4 * j + 2 * h + 1]);
    }
    if (q == 0) {
      w.part_ml[2 * at] = st.m[h];
      w.part_ml[2 * at + 1] = st.l[h];
    }
  }
}

// The warp group: each chunk's stages as they land, then its parts.
__device__ void attend_chunks(const Work& w, const bf16* mask, float scale_log2, Barriers& b,
                              unsigned char* generic_stages) {
  const int lane = threadIdx.x % 32;
  int g = 0;  // stages read so far, over all chunks
  for (int64_t chunk = blockIdx.z, n = 0; chunk < w.chunk_count; chunk += gridDim.z, ++n) {
    const int64_t* rows = w.chunks + chunk * kChunkRows;
    if (rows[0] < 0) return;
    const bf16* mask_row = mask + w.leader[rows[0]] * w.capacity;
    State st;
    // Each stage's mask read during the stage before it, the first one's before the queries land
    // (the mask is made before the decoding step's first layer): its latency is not the stage's.
    MaskPairs next = w.steps > 0 ? load_mask(mask_row, w.first, w.last, lane) : MaskPairs{};
    if (w.steps > 0) barrier_wait(shared_address(&b.query_full), n & 1);
    for (int i = 0; i < w.steps; ++i, ++g) {
      const int slot = g % kStages;
      const int64_t key0 = w.first + i * kKeys;
      const MaskPairs mask_pairs = next;
      if (i + 1 < w.steps) next = load_mask(mask_row, key0 + kKeys, w.last, lane);
      float bias[16];
      load_bias(bias, mask_pairs, key0, w.last, lane);
      barrier_wait(shared_address(&b.full[slot]), (g / kStages) & 1);
      attend_stage(st, w, w.stages + slot * kStageBytes, generic_stages + slot * kStageBytes, key0,
                   bias, scale_log2);
      if (lane == 0) {
        barrier_arrive(shared_address(&b.empty[slot]));
        if (i == w.steps - 1) barrier_arrive(shared_address(&b.query_empty));
      }
    }
    write_parts(st, w, rows);
  }
}

// Block (split, KV head, z) takes chunks z, z + gridDim.z, ... (as decode_attention.cu's prompt kernel
// does) over the split's share of the prompt columns, in 64-key stages.
__global__ void __launch_bounds__(kThreads, 1)
    prompt_attention(const __grid_constant__ CUtensorMap q_map,
                     const __grid_constant__ CUtensorMap k_map,
                     const __grid_constant__ CUtensorMap v_map, const bf16* __restrict__ mask,
                     const int64_t* __restrict__ leader, const int64_t* __restrict__ chunks,
                     int64_t chunk_count, const int64_t* __restrict__ prompt_columns,
                     const int64_t* __restrict__ column, float* __restrict__ part_o,
                     float* __restrict__ part_ml, int kv_heads, int64_t capacity, float scale_log2) {
  extern __shared__ unsigned char raw[];
  __shared__ Barriers b;
  const uint32_t base = (shared_address(raw) + 1023) & ~1023u;
  const int64_t end = min(min(*prompt_columns, *column + 1), capacity);
  const int64_t per = ((end + gridDim.x - 1) / gridDim.x + kKeys - 1) / kKeys * kKeys;
  Work w{leader, chunks, chunk_count, capacity, 0, 0, kv_heads, (int)blockIdx.y, 0,
         base, base + 2 * kTileBytes, part_o, part_ml};
  w.first = blockIdx.x * per;
  w.last = min(w.first + per, end);
  w.steps = w.first < w.last ? (int)((w.last - w.first + kKeys - 1) / kKeys) : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(shared_address(&b.full[s]), 1);
      barrier_init(shared_address(&b.empty[s]), kWarps);
    }
    barrier_init(shared_address(&b.query_full), 1);
    barrier_init(shared_address(&b.query_empty), kWarps);
    fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x / 32 == kWarps) {
    if (threadIdx.x % 32 == 0 && w.steps > 0) copy_chunks(w, &q_map, &k_map, &v_map, b, *column);
    return;
  }
  if (w.steps == 0) {  // no copies to wait behind: empty parts, written after the wait
    wait_prerequisites();
    allow_dependents();
  }
  attend_chunks(w, mask, scale_log2, b, raw + (w.stages - shared_address(raw)));
}

}  // namespace

extern "C" {

// decode_attention.cu's prompt kernel on sm_90 GPUs, with its arguments: q (rows, kv_heads, 8, 128),
// keys and values (rows, kv_heads, capacity, 128), mask (rows, capacity), contiguous bf16; chunks (rows
// x 8), leader, prompt_columns and column on the device; `splits` blocks per (chunk, KV head), whose
// parts go to part_o and part_ml (`splits` per row and query head). kHopperUnsupported (nothing launched)
// unless the device is sm_90, the tensors 16-byte aligned and the cache's rows within int32
// coordinates; else the launch's cudaError_t.
int groundrl_launch_prompt_attention(const void* q, const void* keys, const void* values,
                                     const void* mask, const int64_t* leader, const int64_t* chunks,
                                     const int64_t* prompt_columns, const int64_t* column,
                                     float* part_o, float* part_ml, int64_t rows, int64_t kv_heads,
                                     int64_t capacity, int64_t splits, float scale_log2,
                                     void* stream) {
  int sms = 0;
  const int64_t cache_rows = rows * kv_heads * capacity;
  const bool aligned = reinterpret_cast<uintptr_t>(q) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(keys) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(values) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(mask) % 16 == 0;
  if (!aligned || cache_rows + kKeys > INT32_MAX || splits < 1 || !hopper_device(&sms)) {
    return kHopperUnsupported;
  }
  CUtensorMap q_map, k_map, v_map;
  if (!tile_map(&q_map, q, rows * kv_heads * kGroups, kDim, kDim, kGroups) ||
      !tile_map(&k_map, keys, cache_rows, kDim, kDim, kKeys) ||
      !tile_map(&v_map, values, cache_rows, kDim, kDim, kKeys)) {
    return kHopperUnsupported;
  }
  cudaError_t e = allow_shared(prompt_attention, kSharedBytes);
  if (e != cudaSuccess) return (int)e;
  const dim3 grid((unsigned)splits, (unsigned)kv_heads, (unsigned)((rows + kChunkRows - 1) / kChunkRows));
  e = launch_dependent(prompt_attention, grid, dim3(kThreads), kSharedBytes, static_cast<cudaStream_t>(stream),
                       q_map, k_map, v_map, static_cast<const bf16*>(mask), leader, chunks, rows,
                       prompt_columns, column, part_o, part_ml, (int)kv_heads, capacity, scale_log2);
  return e != cudaSuccess ? (int)e : (int)cudaGetLastError();
}

}
