# A diagnostic build (not for use): the decoding attention's two kernels record, with %globaltimer,
# where each block's time goes, summed over every launch of a run; `GROUNDRL_TRACE=1 groundrl bench
# rollout` prints the means at its end. Applied to the tree by `python3 trace.py ROOT`.
import sys
root = sys.argv[1]


def edit(path, pairs):
    p = root + '/' + path
    s = open(p).read()
    for old, new in pairs:
        assert s.count(old) == 1, (path, old[:60])
        s = s.replace(old, new)
    open(p, 'w').write(s)


clock = '''
__device__ __forceinline__ unsigned long long trace_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
'''

edit('crates/groundrl-tensor/csrc/prompt_attention.cu', [
    ('''#include "dependent_launch.cuh"
#include "hopper.cuh"''', '''#include <cstdio>

#include "dependent_launch.cuh"
#include "hopper.cuh"'''),
    ('''namespace {

using namespace hopper;
''', '''namespace {

using namespace hopper;
''' + clock + '''
// [0] start -> wait released (copy warp), [1] start -> queries landed, [2] a stage's wait for its
// copies, [3] a stage's products and softmax, [4] the parts' writes, [5] start -> end.
__device__ long long trace_sum[8];
__device__ unsigned long long trace_count[8];
__device__ unsigned long long trace_marks[2];  // the latest wait release and end of any block

__device__ __forceinline__ void trace_add(int i, unsigned long long from, unsigned long long to) {
  atomicAdd((unsigned long long*)&trace_sum[i], (unsigned long long)(long long)(to - from));
  atomicAdd(&trace_count[i], 1ull);
}
'''),
    ('''__device__ void copy_chunks(const Work& w, const CUtensorMap* q_map, const CUtensorMap* k_map,
                            const CUtensorMap* v_map, Barriers& b, int64_t column) {''',
     '''__device__ void copy_chunks(const Work& w, const CUtensorMap* q_map, const CUtensorMap* k_map,
                            const CUtensorMap* v_map, Barriers& b, int64_t column, unsigned long long t0) {'''),
    ('''  wait_prerequisites();
  allow_dependents();  // the rotation has ended (see above)
''', '''  wait_prerequisites();
  {
    const unsigned long long tw = trace_now();
    trace_add(0, t0, tw);
    atomicMax(&trace_marks[0], tw);
  }
  allow_dependents();  // the rotation has ended (see above)
'''),
    ('''__device__ void attend_chunks(const Work& w, const bf16* mask, float scale_log2, Barriers& b,
                              unsigned char* generic_stages) {''',
     '''__device__ void attend_chunks(const Work& w, const bf16* mask, float scale_log2, Barriers& b,
                              unsigned char* generic_stages, unsigned long long t0) {
  const bool tr = threadIdx.x == 0;
  unsigned long long te = t0;'''),
    ('''    if (w.steps > 0) barrier_wait(shared_address(&b.query_full), n & 1);
''', '''    if (w.steps > 0) barrier_wait(shared_address(&b.query_full), n & 1);
    if (tr && w.steps > 0) {
      te = trace_now();
      trace_add(1, t0, te);
    }
'''),
    ('''      barrier_wait(shared_address(&b.full[slot]), (g / kStages) & 1);
      attend_stage(st, w, w.stages + slot * kStageBytes, generic_stages + slot * kStageBytes, key0,
                   bias, scale_log2);
''', '''      const unsigned long long tf0 = tr ? trace_now() : 0;
      barrier_wait(shared_address(&b.full[slot]), (g / kStages) & 1);
      const unsigned long long tf = tr ? trace_now() : 0;
      attend_stage(st, w, w.stages + slot * kStageBytes, generic_stages + slot * kStageBytes, key0,
                   bias, scale_log2);
      if (tr) {
        te = trace_now();
        trace_add(2, tf0, tf);
        trace_add(3, tf, te);
      }
'''),
    ('''    write_parts(st, w, rows);
  }
}
''', '''    write_parts(st, w, rows);
    if (tr) {
      const unsigned long long tend = trace_now();
      trace_add(4, te, tend);
      trace_add(5, t0, tend);
      atomicMax(&trace_marks[1], tend);
    }
  }
}
'''),
    ('''  extern __shared__ unsigned char raw[];
  __shared__ Barriers b;
  const uint32_t base''', '''  const unsigned long long t0 = trace_now();
  extern __shared__ unsigned char raw[];
  __shared__ Barriers b;
  const uint32_t base'''),
    ('''copy_chunks(w, &q_map, &k_map, &v_map, b, *column);''',
     '''copy_chunks(w, &q_map, &k_map, &v_map, b, *column, t0);'''),
    ('''  attend_chunks(w, mask, scale_log2, b, raw + (w.stages - shared_address(raw)));''',
     '''  attend_chunks(w, mask, scale_log2, b, raw + (w.stages - shared_address(raw)), t0);'''),
    ('''extern "C" {
''', '''extern "C" {

unsigned long long* groundrl_prompt_trace_marks() {
  void* p = nullptr;
  cudaGetSymbolAddress(&p, trace_marks);
  return (unsigned long long*)p;
}

void groundrl_prompt_trace_dump() {
  long long sum[8];
  unsigned long long count[8];
  cudaMemcpyFromSymbol(sum, trace_sum, sizeof sum);
  cudaMemcpyFromSymbol(count, trace_count, sizeof count);
  const char* names[8] = {"prompt: start -> wait released (copy warp)", "prompt: start -> queries landed",
                          "prompt: a stage's wait for its copies", "prompt: a stage's products",
                          "prompt: the parts' writes", "prompt: start -> end", "", ""};
  for (int i = 0; i < 6; ++i) {
    fprintf(stderr, "trace %-48s %9.3f us  n=%llu\\n", names[i],
            count[i] ? sum[i] / 1e3 / count[i] : 0.0, count[i]);
  }
}
'''),
])

edit('crates/groundrl-tensor/csrc/decode_attention.cu', [
    ('''#include <cstdint>
''', '''#include <cstdint>
#include <cstdio>
'''),
    ('''namespace {

constexpr int kDim = 128;''', '''namespace {
''' + clock + '''
// [0] start - the prompt kernel's last wait release, [1] own columns, [2] waiting for the prompt
// kernel, [3] wait released - the prompt kernel's end, [4] the fold and output, [5] end - the prompt
// kernel's end, [6] own columns done after the prompt kernel's end (count), [7] start - its end.
__device__ long long trace_sum[8];
__device__ unsigned long long trace_count[8];

__device__ __forceinline__ void trace_add(int i, long long v) {
  atomicAdd((unsigned long long*)&trace_sum[i], (unsigned long long)v);
  atomicAdd(&trace_count[i], 1ull);
}

constexpr int kDim = 128;'''),
    ('''                       Parts dst, bool prompt_parts, int64_t kv_heads, int64_t capacity,
                       float scale_log2) {
  extern __shared__ __align__(16) unsigned char shared[];''',
     '''                       Parts dst, bool prompt_parts, int64_t kv_heads, int64_t capacity,
                       float scale_log2, const unsigned long long* marks) {
  const unsigned long long r0 = trace_now();
  extern __shared__ __align__(16) unsigned char shared[];'''),
    ('''  __syncthreads();
  // After the Hopper prompt kernel, launched to start once every block of it has waited for the''',
     '''  __syncthreads();
  const unsigned long long r1 = trace_now();
  // After the Hopper prompt kernel, launched to start once every block of it has waited for the'''),
    ('''  wait_prerequisites();
  allow_dependents();  // the output projection's kernel reads its weights meanwhile, this output after
''', '''  wait_prerequisites();
  const unsigned long long r2 = trace_now();
  allow_dependents();  // the output projection's kernel reads its weights meanwhile, this output after
'''),
    ('''    *reinterpret_cast<uint4*>(dst.out + head * kDim + d0) = o;
    return;''', '''    *reinterpret_cast<uint4*>(dst.out + head * kDim + d0) = o;
    if (threadIdx.x == 0 && prompt_parts && marks) {
      const unsigned long long r3 = trace_now();
      const long long pw = (long long)((volatile const unsigned long long*)marks)[0];
      const long long pe = (long long)((volatile const unsigned long long*)marks)[1];
      trace_add(0, (long long)r0 - pw);
      trace_add(1, (long long)(r1 - r0));
      trace_add(2, (long long)(r2 - r1));
      trace_add(3, (long long)r2 - pe);
      trace_add(4, (long long)(r3 - r2));
      trace_add(5, (long long)r3 - pe);
      trace_add(6, (long long)r1 > pe ? 1000 : 0);
      trace_add(7, (long long)r0 - pe);
    }
    return;'''),
    ('''    e = launch_dependent(split_kernel, grid, dim3(kWarps * 32), split_bytes, s, bf(q), bf(keys), bf(values),
                         bf(mask), column, begin, dst, chunks != nullptr, kv_heads, capacity, scale_log2);''',
     '''    e = launch_dependent(split_kernel, grid, dim3(kWarps * 32), split_bytes, s, bf(q), bf(keys), bf(values),
                         bf(mask), column, begin, dst, chunks != nullptr, kv_heads, capacity, scale_log2,
                         (const unsigned long long*)groundrl_prompt_trace_marks());'''),
    ('''                                                        dst, chunks != nullptr, kv_heads, capacity,
                                                        scale_log2);''',
     '''                                                        dst, chunks != nullptr, kv_heads, capacity,
                                                        scale_log2, nullptr);'''),
    ('''extern "C" {

// How many splits per (row, KV head)''', '''extern "C" {

unsigned long long* groundrl_prompt_trace_marks();
void groundrl_prompt_trace_dump();

void groundrl_attention_trace_dump() {
  cudaDeviceSynchronize();
  groundrl_prompt_trace_dump();
  long long sum[8];
  unsigned long long count[8];
  cudaMemcpyFromSymbol(sum, trace_sum, sizeof sum);
  cudaMemcpyFromSymbol(count, trace_count, sizeof count);
  const char* names[8] = {"per-row: start - prompt's last wait release", "per-row: own columns",
                          "per-row: waiting for the prompt kernel", "per-row: wait released - prompt's end",
                          "per-row: fold and output", "per-row: end - prompt's end",
                          "per-row: own columns done after prompt's end (x1000)", "per-row: start - prompt's end"};
  for (int i = 0; i < 8; ++i) {
    fprintf(stderr, "trace %-48s %9.3f us  n=%llu\\n", names[i],
            count[i] ? sum[i] / 1e3 / count[i] : 0.0, count[i]);
  }
}

// How many splits per (row, KV head)'''),
])

edit('crates/groundrl-tensor/src/fused.rs', [
    ('''    unsafe extern "C" {
        fn groundrl_pin_memory(''', '''    unsafe extern "C" {
        pub(super) fn groundrl_attention_trace_dump();
        fn groundrl_pin_memory('''),
    ('''#[cfg(feature = "cuda")]
mod ffi {''', '''/// Prints the decoding attention's trace (a diagnostic build).
#[cfg(feature = "cuda")]
pub fn attention_trace_dump() {
    // SAFETY: no arguments; it synchronizes the device and copies two symbols.
    unsafe { ffi::groundrl_attention_trace_dump() }
}

#[cfg(feature = "cuda")]
mod ffi {'''),
])

edit('crates/groundrl/src/commands/bench/rollout.rs', [
    ('''        eprintln!("profiler traces written to {}", dir.display());
    }
    Ok(ExitCode::SUCCESS)''', '''        eprintln!("profiler traces written to {}", dir.display());
    }
    #[cfg(feature = "cuda")]
    if std::env::var_os("GROUNDRL_TRACE").is_some() {
        fused::attention_trace_dump();
    }
    Ok(ExitCode::SUCCESS)'''),
])
