// The decoding step's MLP input on Hopper GPUs: silu(x W_gate^T) * (x W_up^T) for up to 64 rows of x
// in one kernel, where cuBLAS's product (gate|up, one matrix) and the SwiGLU kernel after it are two
// launches and a round trip of the (rows, 2 inter) product through memory. Measured on one H200 with
// the 3B decoder's shape (docs/performance.md, "H200, 2026-11-30: a Hopper kernel for the few-row
// products").
//
// Block b takes gate rows [band b, band b + band) and the same up rows, one block an SM: its warp
// group (four warps) multiplies x's 64 rows (the 64-row operand of `wgmma.m64n176k16`) by the band's
// gate and up rows, each in 88 rows of shared memory, in 64-column stages; a fifth warp copies each stage into shared memory with the copy engine
// (three `cp.async.bulk.tensor.2d` copies, gate, up and x, through tensor maps with the 128-byte
// swizzle both operands of `wgmma` read, rows past the end read as zeros), four stages in flight,
// each freed on an mbarrier once its products are done. The band is the smallest even count of rows,
// at most 88, that needs no more blocks than the GPU has SMs: 84 at the 3B shape on an H200's 132
// SMs, where 88 rows a block used 126 of them, the last holding 8 rows; each SM's copies read at a
// rate of their own (measurements/2026-11-30-weight-reads-h200: 3.83 TB/s with 168 rows an SM, 3.72
// with 176). The tiles' rows past the band are zeros. The kernel is launched to start while the
// norm before it runs (dependent_launch.cuh): the first four stages' weights are copied before it
// waits for that norm, x's rows after. A thread's accumulators hold a token's gate
// and up sums for the same columns, so SwiGLU runs on them in registers: each rounded to bf16 as the
// product's output is, then silu rounded and the product rounded as `silu_mul` (kernels.cu) rounds
// them, its division without a branch (silu_quotient). The result equals that composition wherever
// the products' bf16 values do (their sums run in another order than cuBLAS's; see the crate's CUDA
// test).
//
// Built for sm_90a only (`wgmma`); the launcher answers kHopperUnsupported on other GPUs and shapes, and
// the caller takes the composition.

#include "dependent_launch.cuh"
#include "hopper.cuh"

namespace {

using namespace hopper;

constexpr int kRows = 64;         // x's rows a launch (wgmma's m); rows past the count read as zeros
constexpr int kChunk = 64;        // columns of x (k) a stage: 128 bytes of every row, one swizzle span
constexpr int kHalf = 88;         // gate (and up) rows a block at most: its tiles' rows in shared memory
constexpr int kBand = 2 * kHalf;  // wgmma's n
constexpr int kStages = 4;
constexpr int kWarps = 4;  // the warp group that multiplies; warp 4 copies
constexpr int kThreads = (kWarps + 1) * 32;
constexpr int kHalfBytes = kHalf * kChunk * 2, kXBytes = kRows * kChunk * 2;
constexpr int kStageBytes = 2 * kHalfBytes + kXBytes;  // a multiple of 1,024, as the swizzle wants
constexpr int kSharedBytes = kStages * kStageBytes + 1024;  // + the alignment of the first stage

// d += x (64 x 16, at descriptor a) @ w (176 x 16, at b)^T, the warp group's 88 f32 a thread
// (scale-d, the predicate, set: the products add to d).
__device__ __forceinline__ void mma_176(float (&d)[kBand / 2], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n176k16.f32.bf16.bf16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
      "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
      "%80,%81,%82,%83,%84,%85,%86,%87}, %88, %89, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
      : "l"(a), "l"(b), "n"(1));
}

__device__ __forceinline__ float rounded(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// g / d for silu's g and d = 1 + exp(-g), giving the bf16 silu `/` gives, without a branch: the
// fast path of CUDA's correctly rounded division (an approximate reciprocal refined by one Newton
// step, the quotient corrected by its remainder), which `/` wraps in a branch into a slow path around
// each division; those branches kept a thread's 44 divisions from overlapping (1.9 us of the kernel's
// 28.6 us on one H200, measurements/2026-12-02-gate-up-layout-h200, whose program checked every bf16
// g from -13.5 up there). Outside that range (g below -13.5, d above about 7.3e5; |g| from 2^100,
// infinities, NaN) `slow` is set and the caller divides by `/` instead; the crate's CUDA test checks
// every finite bf16 g in both. A zero g keeps its sign, as `/` keeps it.
__device__ __forceinline__ float silu_quotient(float g, float d, bool& slow) {
  slow |= !(g >= -13.5f && g < 0x1p100f);
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(d));
  y = fmaf(y, fmaf(-d, y, 1.0f), y);
  const float q = g * y;
  return g == 0.0f ? g : fmaf(fmaf(-d, q, g), y, q);
}

// silu(gate) * up as silu_mul rounds it, from the products' f32 sums (rounded to bf16 first): the
// division by `/` where kPlain, else by silu_quotient (which sets `slow` where `/` is needed).
template <bool kPlain>
__device__ __forceinline__ bf16 swiglu(float gate, float up, bool& slow) {
  const float g = rounded(gate), d = 1.0f + expf(-g);
  const float s = kPlain ? g / d : silu_quotient(g, d, slow);
  return __float2bfloat16_rn(rounded(s) * rounded(up));
}

// The band's outputs from a thread's accumulators: acc[4 j .. 4 j + 3] hold token t's columns 8 j + 2
// (lane % 4) and the next, then token t + 8's, with t = 16 warp + lane / 4; columns 0-87 are gate
// rows, 88-175 the same up rows (j + 11). Every value is computed before any is stored, with no
// branch between them (accumulators past the band or the last column hold zeros), so that their
// chains overlap; the stores then skip tokens and columns past the band or the end. Whether some
// value needs `/` (see silu_quotient).
template <bool kPlain>
__device__ __forceinline__ bool store_swiglu(const float (&acc)[kBand / 2], bf16* __restrict__ out,
                                             int first, int band, int rows, int inter, int warp,
                                             int lane) {
  bool slow = false;
  __nv_bfloat162 pairs[kHalf / 8][2];
#pragma unroll
  for (int j = 0; j < kHalf / 8; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int g = 4 * j + 2 * h, u = 4 * (j + kHalf / 8) + 2 * h;
      pairs[j][h] = __halves2bfloat162(swiglu<kPlain>(acc[g], acc[u], slow),
                                       swiglu<kPlain>(acc[g + 1], acc[u + 1], slow));
    }
  }
  const int column = first + 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < kHalf / 8; ++j) {
    const int c = column + 8 * j;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int t = warp * 16 + lane / 4 + 8 * h;
      if (t >= rows || c >= inter || c - first >= band) continue;
      bf16* o = out + (int64_t)t * inter + c;
      if (c + 1 < inter) {
        *reinterpret_cast<__nv_bfloat162*>(o) = pairs[j][h];
      } else {
        *o = pairs[j][h].x;
      }
    }
  }
  return slow;
}

// Rows band..87 of every stage's gate and up tiles, which no copy writes, set to zeros by the block's
// threads (made visible to `wgmma`, which reads shared memory as the copies do, by the proxy fence
// and init_stages's barrier after it).
__device__ __forceinline__ void zero_past_band(unsigned char* stages, int band) {
  const int words = (kHalf - band) * kChunk * 2 / 16;  // 16-byte words a tile
  for (int i = threadIdx.x; i < kStages * 2 * words; i += kThreads) {
    const int tile = i / words;  // stage tile / 2, its gate tile or its up tile
    unsigned char* row = stages + (tile / 2) * kStageBytes + (tile % 2) * kHalfBytes + band * kChunk * 2;
    reinterpret_cast<uint4*>(row)[i % words] = make_uint4(0, 0, 0, 0);
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__global__ void __launch_bounds__(kThreads, 1)
    gate_up_swiglu(const __grid_constant__ CUtensorMap x_map,
                   const __grid_constant__ CUtensorMap gate_map,
                   const __grid_constant__ CUtensorMap up_map, bf16* __restrict__ out, int band,
                   int rows, int inter, int hidden) {
  allow_dependents();  // the down projection's kernel copies its weights meanwhile, this output after
  extern __shared__ unsigned char raw[];
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages];
  const uint32_t offset = ((shared_address(raw) + 1023) & ~1023u) - shared_address(raw);
  const uint32_t base = shared_address(raw) + offset;
  const int chunks = hidden / kChunk, first = blockIdx.x * band;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  zero_past_band(raw + offset, band);
  init_stages<kStages>(full, empty, kWarps);

  if (warp == kWarps) {  // the copies
    if (lane == 0) {
      // Chunk i's weights and x's columns into the stage of its slot: the first stages' weights
      // before the wait (no kernel writes them), their x after it (the kernel before this one writes
      // x: dependent_launch.cuh).
      const auto copy_weights = [&](int i, uint32_t stage, uint32_t bar) {
        copy_tile(stage, &gate_map, i * kChunk, first, bar);
        copy_tile(stage + kHalfBytes, &up_map, i * kChunk, first, bar);
      };
      const auto copy_x = [&](int i, uint32_t stage, uint32_t bar) {
        copy_tile(stage + 2 * kHalfBytes, &x_map, i * kChunk, 0, bar);
      };
      const int bytes = 2 * band * kChunk * 2 + kXBytes;
      copy_stages<kStages>(chunks, full, empty, base, kStageBytes, bytes, copy_weights, copy_x);
    }
    return;
  }

  float acc[kBand / 2];
#pragma unroll
  for (int j = 0; j < kBand / 2; ++j) acc[j] = 0.f;
  fence_operands(acc);
  multiply_stages<kStages>(acc, chunks, full, empty, base, kStageBytes, lane, [&](uint32_t stage) {
#pragma unroll
    for (int k = 0; k < kChunk / 16; ++k) {  // 16 columns (32 bytes) an instruction
      mma_176(acc, descriptor(stage + 2 * kHalfBytes + 32 * k), descriptor(stage + 32 * k));
    }
  });

  // Every value with the branch-free division, then, in a thread where some value needs `/`, all of
  // them again with it: such a thread pays the branch-free pass and a pass with `/`. How many
  // threads do was not counted; random-init weights give gates of about +-3, real weights' gates
  // below -13.5 were not measured.
  if (store_swiglu<false>(acc, out, first, band, rows, inter, warp, lane)) {
    store_swiglu<true>(acc, out, first, band, rows, inter, warp, lane);
  }
}

}  // namespace

extern "C" {

// CUDA device `device`'s compute capability as 10 major + minor (90 for an H100 or H200, the GPUs this
// kernel runs on), 0 when it cannot be read.
int groundrl_compute_capability(int device) { return compute_capability(device); }

// out (rows, inter), contiguous = silu(x @ weight[:inter]^T) * (x @ weight[inter:]^T) for x (rows,
// hidden) with rows `x_row` elements apart and weight (2 inter, hidden) contiguous, all bf16 on the
// current device. kHopperUnsupported (nothing launched) unless the device is sm_90 and 1 <= rows <= 64,
// hidden a multiple of 64, x_row a multiple of 8, inter even, x and weight 16-byte aligned, out 4-byte
// aligned and inter at most 88 rows an SM; else the launch's cudaError_t.
int groundrl_launch_gate_up_swiglu(const void* x, int64_t x_row, const void* weight, void* out,
                                   int64_t rows, int64_t hidden, int64_t inter, void* stream) {
  int sms = 0;
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(weight) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(out) % 4 == 0;
  if (rows < 1 || rows > kRows || hidden % kChunk != 0 || x_row % 8 != 0 || inter % 2 != 0 ||
      !aligned || !hopper_device(&sms) || inter > (int64_t)kHalf * sms) {
    return kHopperUnsupported;
  }
  // The smallest even band of rows a block that needs no more blocks than SMs (see the top).
  const int64_t least = (inter + sms - 1) / sms;
  const int band = (int)(least + least % 2);
  const int64_t blocks = (inter + band - 1) / band;
  CUtensorMap x_map, gate_map, up_map;
  const auto* up = static_cast<const bf16*>(weight) + inter * hidden;
  if (!tile_map(&x_map, x, rows, hidden, x_row, kRows) ||
      !tile_map(&gate_map, weight, inter, hidden, hidden, band) ||
      !tile_map(&up_map, up, inter, hidden, hidden, band)) {
    return kHopperUnsupported;
  }
  cudaError_t e = allow_shared(gate_up_swiglu, kSharedBytes);
  if (e != cudaSuccess) return (int)e;
  e = launch_dependent(gate_up_swiglu, dim3((unsigned)blocks), dim3(kThreads), kSharedBytes,
                       static_cast<cudaStream_t>(stream), x_map, gate_map, up_map, static_cast<bf16*>(out),
                       band, (int)rows, (int)inter, (int)hidden);
  return e != cudaSuccess ? (int)e : (int)cudaGetLastError();
}

}
