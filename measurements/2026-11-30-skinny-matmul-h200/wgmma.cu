// The decoding step's few-row matmul y (m, n) = x (m, k) @ w (n, k)^T, m <= 64, with Hopper's
// warp-group MMA (`wgmma`, sm_90a): the 64 rows of x are the instruction's 64-row operand and a band
// of BN weight rows its n, both read from shared memory in the 128-byte-swizzled K-major layout. The
// weights come from a tiled copy, so that every stage's weights are one contiguous block: w_tiled
// holds, for band b and k-chunk c (64 columns), the (BN, 64) tile at ((b * chunks + c) * BN * 64),
// each row's eight 16-byte pieces permuted by the row's low three bits (piece p at p ^ (row & 7)).
// A shared library that wgmma_bench.py times against torch's cuBLAS in the same process.
//
// One warp copies: a stage is one `cp.async.bulk` of the weight tile (BN x 128 bytes, contiguous)
// and one `cp.async.bulk.tensor.2d` of x's 64 rows x 64 columns (a tensor map, 128-byte swizzle, rows
// past m read as zeros), completing on the stage's `full` mbarrier; STAGES stages in flight. One warp
// group multiplies (four m64nBNk16 instructions a stage, one stage's instructions in flight while the
// next is issued) and frees each stage on its `empty` mbarrier. Blocks sharing a band over k
// (gridDim.x of them, a thread-block cluster) add their partial sums through distributed shared
// memory in rank order; each writes its share of the tokens, + bias, + y when accumulating, rounded to
// bf16 once.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xcompiler -fPIC -shared \
//     wgmma.cu -o libwgmma.so
#include <cooperative_groups.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace cg = cooperative_groups;

namespace {

constexpr int kTokens = 64;  // x's rows a launch, those past m read as zeros
constexpr int kChunk = 64;   // k a stage: 128 bytes of every row

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void wgmma_n128(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(a), "l"(b), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_n168(float (&d)[84], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %86, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n168k16.f32.bf16.bf16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
      "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
      "%80,%81,%82,%83"
      "}, %84, %85, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83])
      : "l"(a), "l"(b), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_n176(float (&d)[88], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n176k16.f32.bf16.bf16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
      "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
      "%80,%81,%82,%83,%84,%85,%86,%87"
      "}, %88, %89, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
      : "l"(a), "l"(b), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_n256(float (&d)[128], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
      "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
      "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
      "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"
      "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(a), "l"(b), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// A shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups 1,024 bytes apart.
__device__ __forceinline__ uint64_t descriptor(uint32_t address) {
  return (uint64_t)((address >> 4) & 0x3FFF) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

// Pins the accumulators to their registers across the asynchronous instructions.
template <int N>
__device__ __forceinline__ void fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <int N>
struct Mma;
#define GROUNDRL_MMA(N)                                                                  \
  template <>                                                                            \
  struct Mma<N> {                                                                        \
    static __device__ __forceinline__ void run(float (&d)[N / 2], uint64_t a, uint64_t b, \
                                               int accumulate) {                         \
      wgmma_n##N(d, a, b, accumulate);                                                   \
    }                                                                                    \
  };
GROUNDRL_MMA(128)
GROUNDRL_MMA(168)
GROUNDRL_MMA(176)
GROUNDRL_MMA(256)

__device__ __forceinline__ void barrier_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}

__device__ __forceinline__ void barrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

__device__ __forceinline__ void barrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void expect_bytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void copy_bulk(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void copy_tile(uint32_t dst, const CUtensorMap* map, int col, int row,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3}], [%4];\n" ::"r"(dst),
      "l"(map), "r"(col), "r"(row), "r"(bar)
      : "memory");
}

struct Args {
  const __nv_bfloat16* w_tiled;
  __nv_bfloat16* y;
  int64_t ldy;
  const __nv_bfloat16* bias;  // (n,) or null
  int accumulate;             // y += x @ w^T
  int m, n, k;
  int probe;   // bit 0: no tensor-core work; bit 1: no copies; bit 2: no x copies; bit 3: no stages;
               // bit 4: no epilogue
};

template <int BN, int STAGES>
constexpr int shared_bytes() {
  constexpr int stages = STAGES * (BN + kTokens) * 128;
  constexpr int partials = kTokens * (BN + 4) * 4;
  return (stages > partials ? stages : partials) + 1024;  // + alignment of the swizzled tiles
}

template <int BN, int STAGES, int SPLITS>
__global__ void __launch_bounds__(160, 1)
    wgmma_linear(const __grid_constant__ CUtensorMap x_map, Args a) {
  constexpr int WARPS = 4, THREADS = (WARPS + 1) * 32;
  constexpr int W_BYTES = BN * 128, STAGE_BYTES = W_BYTES + kTokens * 128, PITCH = BN + 4;
  extern __shared__ unsigned char raw[];
  __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
  unsigned char* smem = raw + ((1024 - shared_address(raw) % 1024) % 1024);
  const uint32_t base = shared_address(smem);
  constexpr int splits = SPLITS;
  const int split = blockIdx.x, band = blockIdx.y, n0 = band * BN;
  const int chunks = a.k / kChunk;
  const int c0 = split * chunks / splits;
  const int count = (a.probe & 8) ? 0 : (split + 1) * chunks / splits - c0;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      barrier_init(shared_address(&full[s]), 1);
      barrier_init(shared_address(&empty[s]), WARPS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  float acc[BN / 2];
  if (warp == WARPS) {
    const __nv_bfloat16* w = a.w_tiled + ((int64_t)band * chunks + c0) * BN * kChunk;
    for (int i = 0; i < count; ++i) {
      const int slot = i % STAGES;
      if (i >= STAGES) barrier_wait(shared_address(&empty[slot]), ((i / STAGES) - 1) & 1);
      const uint32_t bar = shared_address(&full[slot]), stage = base + slot * STAGE_BYTES;
      if (a.probe & 2) {
        if (lane == 0) barrier_arrive(bar);
        continue;
      }
      if (lane == 0) {
        expect_bytes(bar, (a.probe & 4) ? W_BYTES : STAGE_BYTES);
        copy_bulk(stage, w + (int64_t)i * BN * kChunk, W_BYTES, bar);
        if (!(a.probe & 4)) copy_tile(stage + W_BYTES, &x_map, (c0 + i) * kChunk, 0, bar);
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < BN / 2; ++j) acc[j] = 0.f;
    fence_operands(acc);
    for (int i = 0; i < count; ++i) {
      const int slot = i % STAGES;
      barrier_wait(shared_address(&full[slot]), (i / STAGES) & 1);
      const uint32_t stage = base + slot * STAGE_BYTES;
      if (!(a.probe & 1)) {
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          Mma<BN>::run(acc, descriptor(stage + W_BYTES + kk * 32), descriptor(stage + kk * 32), 1);
        }
        wgmma_commit();
        wgmma_wait<1>();
        fence_operands(acc);
      }
      // The previous stage's instructions are done: its memory can be refilled.
      if (i > 0 && lane == 0) barrier_arrive(shared_address(&empty[(i - 1) % STAGES]));
    }
    wgmma_wait<0>();
    fence_operands(acc);
  }
  __syncthreads();  // every stage consumed: the stages' memory holds the partial tile from here
  if (a.probe & 16) return;

  // The partial sums meet as f32 (token, band row) tiles in shared memory: with one block a band, its
  // own (SHARE = 64 tokens); with SPLITS blocks a band, block s gets tokens s * SHARE .. + SHARE of
  // every block's sums, in slot [rank][token - s * SHARE], written by their owners' stores into its
  // shared memory once every block of the cluster is past its stages.
  // Warp w holds tokens 16 w .. 16 w + 15: d[4 j .. 4 j + 3] is (token, row 8 j + 2 (lane % 4)), the
  // next row, and the same two rows of token + 8, token = 16 w + lane / 4.
  constexpr int SHARE = kTokens / SPLITS;
  float* tile = reinterpret_cast<float*>(smem);
  cg::cluster_group cluster = cg::this_cluster();
  if (SPLITS > 1) cluster.sync();
  if (warp < WARPS) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int t = warp * 16 + lane / 4 + 8 * h, owner = t / SHARE;
      uint32_t to = shared_address(tile + (split * SHARE + t % SHARE) * PITCH);
      if (SPLITS > 1) asm("mapa.shared::cluster.u32 %0, %0, %1;\n" : "+r"(to) : "r"(owner));
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const uint32_t at = to + (8 * j + 2 * (lane % 4)) * 4;
        asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};\n" ::"r"(at), "f"(acc[4 * j + 2 * h]),
                     "f"(acc[4 * j + 2 * h + 1])
                     : "memory");
      }
    }
  }
  if (SPLITS > 1) {
    cluster.sync();
  } else {
    __syncthreads();
  }

  // This block's share of the tokens, eight rows a thread, the blocks' sums added in rank order:
  // every load of an item issued before its sums, one 16-byte store.
  const bool vectors = a.n % 8 == 0 && a.ldy % 8 == 0 && reinterpret_cast<uintptr_t>(a.y) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(a.bias) % 16 == 0;
  const int t0 = split * kTokens / splits, t1 = min((split + 1) * kTokens / splits, a.m);
#pragma unroll 1
  for (int e = t0 * (BN / 8) + tid; e < t1 * (BN / 8); e += THREADS) {
    const int t = e / (BN / 8), r = (e % (BN / 8)) * 8, row = n0 + r, slot = t - t0;
    if (row >= a.n) continue;
    float4 part[SPLITS][2];
#pragma unroll
    for (int s = 0; s < SPLITS; ++s) {
      const float* from = tile + (s * SHARE + slot) * PITCH + r;
      part[s][0] = *reinterpret_cast<const float4*>(from);
      part[s][1] = *reinterpret_cast<const float4*>(from + 4);
    }
    __nv_bfloat16* out = a.y + (int64_t)t * a.ldy + row;
    const int valid = min(8, a.n - row);
    __nv_bfloat16 extra[2][8];  // bias, then y
    if (vectors) {
      if (a.bias) *reinterpret_cast<uint4*>(extra[0]) = *reinterpret_cast<const uint4*>(a.bias + row);
      if (a.accumulate) *reinterpret_cast<uint4*>(extra[1]) = *reinterpret_cast<const uint4*>(out);
    } else {
      for (int j = 0; j < valid; ++j) {
        if (a.bias) extra[0][j] = a.bias[row + j];
        if (a.accumulate) extra[1][j] = out[j];
      }
    }
    float sum[8];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      sum[4 * h] = part[0][h].x;
      sum[4 * h + 1] = part[0][h].y;
      sum[4 * h + 2] = part[0][h].z;
      sum[4 * h + 3] = part[0][h].w;
    }
#pragma unroll
    for (int s = 1; s < SPLITS; ++s) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        sum[4 * h] += part[s][h].x;
        sum[4 * h + 1] += part[s][h].y;
        sum[4 * h + 2] += part[s][h].z;
        sum[4 * h + 3] += part[s][h].w;
      }
    }
    __nv_bfloat16 result[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float v = sum[j];
      if (a.bias) v += __bfloat162float(extra[0][j]);
      if (a.accumulate) v += __bfloat162float(extra[1][j]);
      result[j] = __float2bfloat16_rn(v);
    }
    if (vectors) {
      *reinterpret_cast<uint4*>(out) = *reinterpret_cast<const uint4*>(result);
    } else {
      for (int j = 0; j < valid; ++j) out[j] = result[j];
    }
  }
}

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  if (!fn) {
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&fn),
                                         12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      fn = nullptr;
    }
  }
  return fn;
}

template <int BN, int STAGES, int SPLITS>
int launch(const void* x, int64_t ldx, const Args& a, int splits, cudaStream_t stream) {
  if (splits != SPLITS) return -1;
  auto encode = encoder();
  if (!encode) return -2;
  CUtensorMap map;
  const cuuint64_t dims[2] = {(cuuint64_t)a.k, (cuuint64_t)a.m};
  const cuuint64_t strides[1] = {(cuuint64_t)ldx * 2};
  const cuuint32_t box[2] = {kChunk, kTokens}, unit[2] = {1, 1};
  if (encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(x), dims, strides, box,
             unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
    return -3;
  }
  constexpr int bytes = shared_bytes<BN, STAGES>();
  auto kernel = wgmma_linear<BN, STAGES, SPLITS>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess && splits > 8) {
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  }
  if (e != cudaSuccess) return (int)e;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3((unsigned)splits, (unsigned)((a.n + BN - 1) / BN));
  config.blockDim = dim3(160);
  config.dynamicSmemBytes = bytes;
  config.stream = stream;
  cudaLaunchAttribute cluster = {};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = (unsigned)splits;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = splits > 1 ? 1 : 0;
  return (int)cudaLaunchKernelEx(&config, kernel, map, a);
}

}  // namespace

extern "C" {

// The band rows of variant v (the tiling the weights must have).
int wgmma_band_rows(int variant) {
  switch (variant) {
    case 0: return 168;
    case 1: return 128;
    case 2: return 168;
    case 3: return 128;
    default: return -1;
  }
}

int wgmma_linear_launch(int variant, const void* x, int64_t ldx, const void* w_tiled, void* y,
                        int64_t ldy, const void* bias, int accumulate, int m, int n, int k,
                        int splits, int probe, void* stream) {
  if (m < 1 || m > kTokens || k % kChunk != 0 || splits < 1 ||
      splits > k / kChunk || ldx % 8 != 0 || splits > 8) {
    return -1;
  }
  const Args a = {static_cast<const __nv_bfloat16*>(w_tiled), static_cast<__nv_bfloat16*>(y), ldy,
                  static_cast<const __nv_bfloat16*>(bias), accumulate, m, n, k, probe};
  auto s = static_cast<cudaStream_t>(stream);
  switch (variant) {
    case 0: return launch<168, 4, 1>(x, ldx, a, splits, s);  // 119 KB
    case 1: return launch<128, 4, 8>(x, ldx, a, splits, s);  // 96 KB
    case 2: return launch<168, 7, 1>(x, ldx, a, splits, s);  // 208 KB
    case 3: return launch<128, 6, 8>(x, ldx, a, splits, s);  // 144 KB
    default: return -1;
  }
}

}
