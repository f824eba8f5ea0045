// A C ABI over the CUDA kernels of kernels.cu, decode_attention.cu (with prompt_attention.cu),
// sampling.cu, adamw.cu, gated_delta.cu, gate_up_swiglu.cu and split_product.cu, for
// tensors (autograd.cpp wraps the kernels that training differentiates):
// checks devices, dtypes and layouts (a C++ exception, turned into an error message, rather than a
// kernel reading out of bounds) and launches on libtorch's current stream, so the kernels join
// captured CUDA graphs like any ATen op.
// The caller allocates the outputs.

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <tuple>

#include "guarded.h"
#include "hopper_launch.h"
#include "tensor_args.h"

extern "C" {
int groundrl_launch_decode_rotary_write(const void* qkv, int64_t qkv_row, const float* parts,
                                        int64_t splits, const void* bias, const void* cos,
                                        const void* ssin, void* q_out, void* keys, void* values,
                                        const int64_t* column, int64_t rows, int64_t heads,
                                        int64_t kv_heads, int64_t capacity, int64_t half,
                                        void* stream);
int groundrl_launch_rotary_tables(const int64_t* positions, const float* inv_freq, void* cos,
                                  void* ssin, int64_t rows, int64_t half, void* stream);
int groundrl_launch_adamw(void* param, int param_bf16, const void* grad, float* exp_avg,
                          float* exp_avg_sq, float* master, int64_t n, const float* scalars,
                          void* stream);
int groundrl_launch_rms_norm(const void* x, int64_t x_row, const void* w, void* out, int64_t rows,
                             int64_t hidden, float eps, void* stream);
int groundrl_launch_add_rms_norm(void* x, int64_t x_row, const float* parts, int64_t splits,
                                 const void* w, void* out, int64_t rows, int64_t hidden, float eps,
                                 void* stream);
int groundrl_launch_sample(const void* logits, int bf16, int64_t rows, int64_t vocab,
                           const float* temperature, const bool* greedy, const bool* banned,
                           const float* uniforms, int64_t* tokens, float* logprobs, void* stream);
int groundrl_launch_select(const void* logits, int bf16, int64_t rows, int64_t vocab,
                           const float* temperature, const bool* greedy, const bool* banned,
                           const float* uniforms, int64_t steps, const int64_t* index, bool* finished,
                           const int64_t* stops, int64_t stop_ids, const int64_t* limits, int64_t pad,
                           int64_t* table_tokens, float* table_logprobs, int64_t* next,
                           void* stream);
int64_t groundrl_decode_attention_splits(int64_t rows, int64_t kv_heads, int64_t capacity,
                                         int grouped, int device);
int64_t groundrl_decode_attention_parts(int grouped, int64_t splits);
int groundrl_launch_decode_attention(const void* q, const void* keys, const void* values,
                                     const void* mask, const int64_t* column, const int64_t* leader,
                                     const int64_t* chunks, const int64_t* prompt_columns, void* out,
                                     float* part_o, float* part_ml, int64_t rows, int64_t kv_heads,
                                     int64_t capacity, int64_t splits, float scale, void* stream,
                                     int* hopper);
int groundrl_launch_linear_attention_step(const void* qkv_proj, void* conv_state,
                                          const void* conv_weight, void* qkv, int64_t kernel,
                                          const void* z, const void* a, const void* b,
                                          const void* a_log, const void* dt_bias, const void* norm,
                                          float* state, void* out, int64_t rows, int64_t key_heads,
                                          int64_t value_heads, int64_t dk, int64_t dv, int bf16,
                                          float l2_eps, float norm_eps, void* stream);
}

namespace {

using namespace groundrl;

// cos and signed_sin: contiguous (rows, dim) tables of `dtype`.
void check_tables(const at::Tensor& cos, const at::Tensor& ssin, at::ScalarType dtype, int64_t rows,
                  int64_t dim) {
  check(cos, dtype, "cos");
  check(ssin, dtype, "signed_sin");
  require(cos.sizes() == at::IntArrayRef({rows, dim}) && cos.is_contiguous() &&
              ssin.sizes() == cos.sizes() && ssin.is_contiguous(),
          "cos and signed_sin must be contiguous (rows, dim)");
}

}  // namespace

extern "C" {

// One decoding step's rotation and cache write; see kernels.cu. Without `bias_` (null), qkv is the
// bf16 projection (rows, heads + 2 kv_heads, dim) with contiguous heads; with it, qkv is the
// projection's f32 slices (1 to 4 splits, rows, (heads + 2 kv_heads) dim), contiguous, which the
// kernel sums with the bias (bf16, contiguous (heads + 2 kv_heads) dim). cos, signed_sin (rows, dim)
// contiguous; q_out (rows, heads, dim), keys and values (rows, kv_heads, capacity, dim) contiguous;
// column a one-element int64 CUDA tensor.
int groundrl_decode_rotary_write(void* qkv_, void* bias_, void* cos_, void* ssin_, void* q_out_,
                                 void* keys_, void* values_, void* column_, int64_t heads) {
  return guarded([&] {
    const auto &qkv = tensor(qkv_), &cos = tensor(cos_), &ssin = tensor(ssin_);
    const auto &q_out = tensor(q_out_), &keys = tensor(keys_), &values = tensor(values_);
    const auto& column = tensor(column_);
    for (auto [t, name] : {std::pair{&q_out, "q_out"}, {&keys, "keys"}, {&values, "values"}}) {
      check(*t, at::kBFloat16, name);
    }
    check(column, at::kLong, "column");
    require(column.numel() == 1, "column must hold one value");
    require(q_out.dim() == 3 && q_out.is_contiguous() && q_out.size(1) == heads &&
                q_out.size(2) % 2 == 0,
            "q_out must be contiguous (rows, heads, even dim)");
    const int64_t rows = q_out.size(0), dim = q_out.size(2);
    require(keys.dim() == 4 && keys.is_contiguous() && values.sizes() == keys.sizes() &&
                values.is_contiguous() && keys.size(0) == rows && keys.size(3) == dim,
            "keys and values must be contiguous (rows, kv_heads, capacity, dim)");
    const int64_t kv_heads = keys.size(1), capacity = keys.size(2), width = (heads + 2 * kv_heads) * dim;
    const float* parts = nullptr;
    const void* bias = nullptr;
    int64_t splits = 0;
    if (bias_ == nullptr) {
      check(qkv, at::kBFloat16, "qkv");
      require(qkv.dim() == 3 && qkv.size(0) == rows && qkv.size(1) == heads + 2 * kv_heads &&
                  qkv.size(2) == dim && qkv.stride(2) == 1 && qkv.stride(1) == dim,
              "qkv must be (rows, heads + 2 kv_heads, dim) with contiguous heads");
    } else {
      const auto& b = tensor(bias_);
      check(qkv, at::kFloat, "qkv parts");
      check(b, at::kBFloat16, "bias");
      require(qkv.dim() == 3 && qkv.size(0) >= 1 && qkv.size(0) <= 4 && qkv.size(1) == rows &&
                  qkv.size(2) == width && qkv.is_contiguous(),
              "qkv parts must be contiguous (splits, rows, (heads + 2 kv_heads) dim), 1 to 4 splits");
      require(b.dim() == 1 && b.size(0) == width && b.is_contiguous() && b.device() == qkv.device(),
              "bias must be contiguous ((heads + 2 kv_heads) dim) on the parts' device");
      parts = qkv.data_ptr<float>();
      bias = b.data_ptr();
      splits = qkv.size(0);
    }
    check_tables(cos, ssin, at::kBFloat16, rows, dim);
    require_threads(rows * width / 2);
    c10::cuda::CUDAGuard guard(qkv.device());
    launched(groundrl_launch_decode_rotary_write(
        qkv.data_ptr(), qkv.stride(0), parts, splits, bias, cos.data_ptr(), ssin.data_ptr(),
        q_out.data_ptr(), keys.data_ptr(), values.data_ptr(), column.data_ptr<int64_t>(), rows, heads,
        kv_heads, capacity, dim / 2, stream_of(qkv)));
  });
}

// A decoding step's rotation tables (kernels.cu's rotary_tables): positions (rows,) int64,
// inv_freq (half,) f32, cos and ssin contiguous (rows, 2 half) bf16.
int groundrl_rotary_tables(void* positions_, void* inv_freq_, void* cos_, void* ssin_) {
  return guarded([&] {
    const auto &positions = tensor(positions_), &inv_freq = tensor(inv_freq_);
    const auto &cos = tensor(cos_), &ssin = tensor(ssin_);
    check(positions, at::kLong, "positions");
    check(inv_freq, at::kFloat, "inv_freq");
    require(positions.dim() == 1 && positions.is_contiguous(), "positions must be contiguous (rows,)");
    require(inv_freq.dim() == 1 && inv_freq.is_contiguous(), "inv_freq must be contiguous (half,)");
    const int64_t rows = positions.size(0), half = inv_freq.size(0);
    check_tables(cos, ssin, at::kBFloat16, rows, 2 * half);
    require_threads(rows * half);
    c10::cuda::CUDAGuard guard(positions.device());
    launched(groundrl_launch_rotary_tables(positions.data_ptr<int64_t>(), inv_freq.data_ptr<float>(),
                                           cos.data_ptr(), ssin.data_ptr(), rows, half,
                                           stream_of(positions)));
  });
}

// One AdamW update of `param` (bf16 or f32) from `grad` (its dtype) with the f32 moments and, when
// `master_` is not null, the f32 master copy; all contiguous, of one size, on one device. `scalars`:
// the seven f32 values of adamw.cu's AdamwScalars, in order.
int groundrl_adamw(void* param_, void* grad_, void* exp_avg_, void* exp_avg_sq_, void* master_,
                   const float* scalars) {
  return guarded([&] {
    const auto &param = tensor(param_), &grad = tensor(grad_);
    const auto &exp_avg = tensor(exp_avg_), &exp_avg_sq = tensor(exp_avg_sq_);
    auto dtype = param.scalar_type();
    require(dtype == at::kBFloat16 || dtype == at::kFloat, "the parameter must be bf16 or f32");
    check(param, dtype, "param");
    check(grad, dtype, "grad");
    check(exp_avg, at::kFloat, "exp_avg");
    check(exp_avg_sq, at::kFloat, "exp_avg_sq");
    std::initializer_list<const at::Tensor*> all = {&param, &grad, &exp_avg, &exp_avg_sq};
    for (const auto* t : all) {
      require(t->is_contiguous() && t->numel() == param.numel() && t->device() == param.device(),
              "AdamW's tensors must be contiguous, of one size, on one device");
    }
    float* master = nullptr;
    if (master_ != nullptr) {
      const auto& m = tensor(master_);
      check(m, at::kFloat, "master");
      require(m.is_contiguous() && m.numel() == param.numel() && m.device() == param.device(),
              "the master copy must be contiguous, of the parameter's size, on its device");
      master = m.data_ptr<float>();
    }
    c10::cuda::CUDAGuard guard(param.device());
    launched(groundrl_launch_adamw(param.data_ptr(), dtype == at::kBFloat16 ? 1 : 0,
                                   grad.data_ptr(), exp_avg.data_ptr<float>(),
                                   exp_avg_sq.data_ptr<float>(), master, param.numel(), scalars,
                                   stream_of(param)));
  });
}

// out (rows, hidden) contiguous = RMSNorm of x (rows, hidden), strided in rows, with weight
// (hidden) contiguous; see kernels.cu.
int groundrl_rms_norm(void* x_, void* weight_, void* out_, double eps) {
  return guarded([&] {
    const auto &x = tensor(x_), &weight = tensor(weight_), &out = tensor(out_);
    check(x, at::kBFloat16, "x");
    check(weight, at::kBFloat16, "weight");
    check(out, at::kBFloat16, "out");
    require(x.dim() == 2 && x.size(1) % 256 == 0 && x.size(1) <= 8192,
            "x must be (rows, hidden a multiple of 256 up to 8192)");
    require(weight.dim() == 1 && weight.size(0) == x.size(1), "weight must be (hidden)");
    require(out.sizes() == x.sizes() && out.is_contiguous(), "out must be contiguous like x");
    c10::cuda::CUDAGuard guard(x.device());
    launched(groundrl_launch_rms_norm(x.data_ptr(), x.stride(0), weight.data_ptr(), out.data_ptr(),
                                      x.size(0), x.size(1), (float)eps, stream_of(x)));
  });
}

// x (rows, hidden), strided in rows, += the sum of parts (1 to 4 splits, rows, hidden) f32
// contiguous, then out (rows, hidden) contiguous = RMSNorm of the new x with weight (hidden); see
// kernels.cu.
int groundrl_add_rms_norm(void* x_, void* parts_, void* weight_, void* out_, double eps) {
  return guarded([&] {
    const auto &x = tensor(x_), &parts = tensor(parts_), &weight = tensor(weight_),
               &out = tensor(out_);
    check(x, at::kBFloat16, "x");
    check(parts, at::kFloat, "parts");
    check(weight, at::kBFloat16, "weight");
    check(out, at::kBFloat16, "out");
    require(x.dim() == 2 && x.size(1) % 256 == 0 && x.size(1) <= 8192 && x.stride(1) == 1,
            "x must be (rows, hidden a multiple of 256 up to 8192), its rows contiguous");
    require(parts.dim() == 3 && parts.size(0) >= 1 && parts.size(0) <= 4 &&
                parts.size(1) == x.size(0) && parts.size(2) == x.size(1) && parts.is_contiguous(),
            "parts must be contiguous (1 to 4 splits, rows, hidden) for x (rows, hidden)");
    require(weight.dim() == 1 && weight.size(0) == x.size(1), "weight must be (hidden)");
    require(out.sizes() == x.sizes() && out.is_contiguous(), "out must be contiguous like x");
    require(parts.device() == x.device() && weight.device() == x.device() &&
                out.device() == x.device(),
            "x, parts, weight and out must be on one device");
    c10::cuda::CUDAGuard guard(x.device());
    launched(groundrl_launch_add_rms_norm(x.data_ptr(), x.stride(0), parts.data_ptr<float>(),
                                          parts.size(0), weight.data_ptr(), out.data_ptr(),
                                          x.size(0), x.size(1), (float)eps, stream_of(x)));
  });
}

// out (rows, inter) = silu(x weight[:inter]^T) * (x weight[inter:]^T) for x (rows, hidden) and
// weight (2 inter, hidden) contiguous, out contiguous, all bf16 on one device; *ran = 0 (nothing
// launched) where gate_up_swiglu.cu's kernel does not run (not an sm_90 GPU, more than 64 rows, ...).
int groundrl_gate_up_swiglu(void* x_, void* weight_, void* out_, int* ran) {
  return guarded([&] {
    const auto &x = tensor(x_), &weight = tensor(weight_), &out = tensor(out_);
    check(x, at::kBFloat16, "x");
    check(weight, at::kBFloat16, "weight");
    check(out, at::kBFloat16, "out");
    require(x.dim() == 2 && weight.dim() == 2 && weight.size(1) == x.size(1) &&
                weight.size(0) % 2 == 0 && weight.is_contiguous() && weight.device() == x.device(),
            "weight must be contiguous (2 inter, hidden) for x (rows, hidden), on x's device");
    const int64_t inter = weight.size(0) / 2;
    require(out.sizes() == at::IntArrayRef({x.size(0), inter}) && out.is_contiguous() &&
                out.device() == x.device(),
            "out must be contiguous (rows, inter) on x's device");
    c10::cuda::CUDAGuard guard(x.device());
    const int code = groundrl_launch_gate_up_swiglu(x.data_ptr(), x.stride(0), weight.data_ptr(),
                                                    out.data_ptr(), x.size(0), x.size(1), inter,
                                                    stream_of(x));
    *ran = code != kHopperUnsupported;
    if (*ran) launched(code);
  });
}

// parts (splits, rows, n) f32 = the products of x (rows, k) and weight (n, k) over `splits` slices
// of k (split_product.cu), x's rows contiguous, weight contiguous, both bf16, all on one device; *ran =
// 0 (nothing launched) where that kernel does not run (not an sm_90 GPU, more than 64 rows, ...).
int groundrl_split_product(void* x_, void* weight_, void* parts_, int* ran) {
  return guarded([&] {
    const auto &x = tensor(x_), &weight = tensor(weight_), &parts = tensor(parts_);
    check(x, at::kBFloat16, "x");
    check(weight, at::kBFloat16, "weight");
    check(parts, at::kFloat, "parts");
    require(x.dim() == 2 && x.stride(1) == 1, "x must be (rows, k) with contiguous rows");
    require(weight.dim() == 2 && weight.size(1) == x.size(1) && weight.is_contiguous() &&
                weight.device() == x.device(),
            "weight must be contiguous (n, k) for x (rows, k), on x's device");
    require(parts.dim() == 3 && parts.size(1) == x.size(0) && parts.size(2) == weight.size(0) &&
                parts.is_contiguous() && parts.device() == x.device(),
            "parts must be contiguous (splits, rows, n) on x's device");
    c10::cuda::CUDAGuard guard(x.device());
    const int code = groundrl_launch_split_product(x.data_ptr(), x.stride(0), weight.data_ptr(),
                                                   parts.data_ptr<float>(), x.size(0), x.size(1),
                                                   weight.size(0), parts.size(0), stream_of(x));
    *ran = code != kHopperUnsupported;
    if (*ran) launched(code);
  });
}

// The sampler's inputs (`rollout/sampling.rs`) checked: logits (rows, vocab) f32 or bf16 and
// contiguous, vocab a multiple of 4, and per row or per token the settings; `vectors` more (tensor,
// dtype, values, name) one-dimensional contiguous ones.
void check_sampling(const at::Tensor& logits, const at::Tensor& temperature, const at::Tensor& greedy,
                    const at::Tensor& banned,
                    std::initializer_list<std::tuple<const at::Tensor*, at::ScalarType, int64_t, const char*>>
                        vectors) {
  require(logits.scalar_type() == at::kFloat || logits.scalar_type() == at::kBFloat16,
          "logits must be f32 or bf16");
  check(logits, logits.scalar_type(), "logits");
  require(logits.dim() == 2 && logits.is_contiguous() && logits.size(1) % 4 == 0,
          "logits must be contiguous (rows, vocab a multiple of 4)");
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  auto one = [](const std::tuple<const at::Tensor*, at::ScalarType, int64_t, const char*>& v) {
    auto [t, dtype, size, name] = v;
    check(*t, dtype, name);
    require(t->dim() == 1 && t->size(0) == size && t->is_contiguous(),
            std::string(name) + " must be contiguous with " + std::to_string(size) + " values");
  };
  for (const auto& v : {std::tuple{&temperature, at::kFloat, rows, "temperature"},
                        {&greedy, at::kBool, rows, "greedy"}, {&banned, at::kBool, vocab, "banned"}}) {
    one(v);
  }
  for (const auto& v : vectors) one(v);
}

// tokens (rows,) int64 and logprobs (rows,) f32 drawn from logits (rows, vocab) f32 or bf16
// contiguous by temperature, uniforms (rows,) f32, greedy (rows,) bool and banned (vocab,) bool; see
// sampling.cu.
int groundrl_sample(void* logits_, void* temperature_, void* greedy_, void* banned_, void* uniforms_,
                    void* tokens_, void* logprobs_) {
  return guarded([&] {
    const auto &logits = tensor(logits_), &temperature = tensor(temperature_);
    const auto &greedy = tensor(greedy_), &banned = tensor(banned_), &uniforms = tensor(uniforms_);
    const auto &tokens = tensor(tokens_), &logprobs = tensor(logprobs_);
    const int64_t rows = logits.dim() == 2 ? logits.size(0) : -1;
    check_sampling(logits, temperature, greedy, banned,
                   {{&uniforms, at::kFloat, rows, "uniforms"}, {&tokens, at::kLong, rows, "tokens"},
                    {&logprobs, at::kFloat, rows, "logprobs"}});
    c10::cuda::CUDAGuard guard(logits.device());
    launched(groundrl_launch_sample(logits.data_ptr(), logits.scalar_type() == at::kBFloat16 ? 1 : 0,
                                    rows, logits.size(1), temperature.data_ptr<float>(),
                                    greedy.data_ptr<bool>(), banned.data_ptr<bool>(),
                                    uniforms.data_ptr<float>(), tokens.data_ptr<int64_t>(),
                                    logprobs.data_ptr<float>(), stream_of(logits)));
  });
}

// A decoding step's selection and record in one kernel (sampling.cu's StepOut): uniforms,
// table_tokens, table_logprobs (rows, steps); index (1,) int64; finished (rows,) bool; stops (rows,
// stop ids) int64; limits (rows,) int64; next (rows,) int64.
int groundrl_select(void* logits_, void* temperature_, void* greedy_, void* banned_, void* uniforms_,
                    void* index_, void* finished_, void* stops_, void* limits_, int64_t pad,
                    void* table_tokens_, void* table_logprobs_, void* next_) {
  return guarded([&] {
    const auto &logits = tensor(logits_), &temperature = tensor(temperature_);
    const auto &greedy = tensor(greedy_), &banned = tensor(banned_), &uniforms = tensor(uniforms_);
    const auto &index = tensor(index_), &finished = tensor(finished_), &stops = tensor(stops_);
    const auto &limits = tensor(limits_), &table_tokens = tensor(table_tokens_);
    const auto &table_logprobs = tensor(table_logprobs_), &next = tensor(next_);
    const int64_t rows = logits.dim() == 2 ? logits.size(0) : -1;
    check_sampling(logits, temperature, greedy, banned,
                   {{&index, at::kLong, 1, "index"}, {&finished, at::kBool, rows, "finished"},
                    {&limits, at::kLong, rows, "limits"}, {&next, at::kLong, rows, "next"}});
    const int64_t steps = uniforms.dim() == 2 ? uniforms.size(1) : -1;
    for (auto [t, dtype, name] : {std::tuple{&uniforms, at::kFloat, "uniforms"},
                                  {&table_tokens, at::kLong, "table_tokens"},
                                  {&table_logprobs, at::kFloat, "table_logprobs"}}) {
      check(*t, dtype, name);
      require(t->dim() == 2 && t->size(0) == rows && t->size(1) == steps && t->is_contiguous(),
              std::string(name) + " must be contiguous (rows, steps) like uniforms");
    }
    check(stops, at::kLong, "stops");
    require(stops.dim() == 2 && stops.size(0) == rows && stops.is_contiguous(),
            "stops must be contiguous (rows, stop ids)");
    c10::cuda::CUDAGuard guard(logits.device());
    launched(groundrl_launch_select(
        logits.data_ptr(), logits.scalar_type() == at::kBFloat16 ? 1 : 0, rows, logits.size(1),
        temperature.data_ptr<float>(), greedy.data_ptr<bool>(), banned.data_ptr<bool>(),
        uniforms.data_ptr<float>(), steps, index.data_ptr<int64_t>(), finished.data_ptr<bool>(),
        stops.data_ptr<int64_t>(), stops.size(1), limits.data_ptr<int64_t>(), pad,
        table_tokens.data_ptr<int64_t>(), table_logprobs.data_ptr<float>(), next.data_ptr<int64_t>(),
        stream_of(logits)));
  });
}

// Whether autograd records operations on this thread (false inside a no-grad guard).
int groundrl_grad_enabled() { return at::GradMode::is_enabled() ? 1 : 0; }

// Lets libtorch's SDPA pick cuDNN's attention (on, its default) or not (then the flash and
// memory-efficient kernels); process-wide, as torch.backends.cuda.enable_cudnn_sdp.
void groundrl_set_cudnn_attention(int on) { at::globalContext().setSDPUseCuDNN(on != 0); }

// out (rows, kv_heads, 8, 128) = attention of q (rows, kv_heads, 8, 128) over keys and values
// (rows, kv_heads, capacity, 128) with the additive mask (rows, 1, 1, capacity) through the column held
// by `column` (a one-element int64 CUDA tensor); see decode_attention.cu. All contiguous bf16.
// `splits` blocks per (row, KV head), or as many as fill the GPU when it is 0. `leader_`, `chunks_`
// and `prompt_columns_` (int64 CUDA tensors: one per row, (rows, 8), and one value) are all null or
// all set:
// each row's prompt's first row, the chunks of up to 8 rows of one prompt that read the prompt
// columns together (-1 for none), and the number of prompt columns; `splits` then counts the blocks
// per (chunk, KV head) over the prompt columns. *hopper = 1 where prompt_attention.cu's kernel read
// the prompt columns (sm_90 GPUs), else 0.
int groundrl_decode_attention(void* q_, void* keys_, void* values_, void* mask_, void* column_,
                              void* leader_, void* chunks_, void* prompt_columns_, void* out_,
                              int64_t splits, int* hopper) {
  return guarded([&] {
    const auto &q = tensor(q_), &keys = tensor(keys_), &values = tensor(values_);
    const auto &mask = tensor(mask_), &column = tensor(column_), &out = tensor(out_);
    for (auto [t, name] : {std::pair{&q, "q"}, {&keys, "keys"}, {&values, "values"},
                           {&mask, "mask"}, {&out, "out"}}) {
      check(*t, at::kBFloat16, name);
      require(t->is_contiguous(), std::string(name) + " must be contiguous");
    }
    check(column, at::kLong, "column");
    require(column.numel() == 1, "column must hold one value");
    require(q.dim() == 4 && q.size(2) == 8 && q.size(3) == 128,
            "q must be (rows, kv_heads, 8, 128)");
    int64_t rows = q.size(0), kv_heads = q.size(1);
    require(keys.dim() == 4 && keys.size(0) == rows && keys.size(1) == kv_heads &&
                keys.size(3) == 128 && values.sizes() == keys.sizes(),
            "keys and values must be (rows, kv_heads, capacity, 128)");
    int64_t capacity = keys.size(2);
    require(capacity % 8 == 0,
            "the capacity must be a multiple of 8 (the mask is read 16 bytes at a time)");
    require(mask.numel() == rows * capacity, "mask must hold (rows, capacity) values");
    require(out.sizes() == q.sizes(), "out must be shaped like q");
    const bool grouped = leader_ != nullptr;
    require(grouped == (chunks_ != nullptr) && grouped == (prompt_columns_ != nullptr),
            "leader, chunks and prompt_columns go together");
    const int64_t *leader = nullptr, *chunks = nullptr, *prompt_columns = nullptr;
    if (grouped) {
      check(tensor(leader_), at::kLong, "leader");
      check(tensor(chunks_), at::kLong, "chunks");
      check(tensor(prompt_columns_), at::kLong, "prompt_columns");
      require(tensor(leader_).numel() == rows, "leader must hold one row per row");
      require(tensor(chunks_).numel() == rows * 8 && tensor(chunks_).is_contiguous(),
              "chunks must be contiguous (rows, 8)");
      require(tensor(prompt_columns_).numel() == 1, "prompt_columns must hold one value");
      leader = tensor(leader_).data_ptr<int64_t>();
      chunks = tensor(chunks_).data_ptr<int64_t>();
      prompt_columns = tensor(prompt_columns_).data_ptr<int64_t>();
    }
    c10::cuda::CUDAGuard guard(q.device());
    require(splits >= 0, "splits must not be negative");
    if (splits == 0) {
      splits = groundrl_decode_attention_splits(rows, kv_heads, capacity, grouped,
                                                q.device().index());
    }
    const int64_t parts = rows * kv_heads * 8 * groundrl_decode_attention_parts(grouped, splits);
    auto part_o = at::empty({parts * 128}, q.options().dtype(at::kFloat));
    auto part_ml = at::empty({parts * 2}, q.options().dtype(at::kFloat));
    launched(groundrl_launch_decode_attention(
        q.data_ptr(), keys.data_ptr(), values.data_ptr(), mask.data_ptr(),
        column.data_ptr<int64_t>(), leader, chunks, prompt_columns, out.data_ptr(),
        part_o.data_ptr<float>(), part_ml.data_ptr<float>(), rows, kv_heads, capacity, splits,
        1.0f / std::sqrt(128.0f), stream_of(q), hopper));
  });
}

// One decoding step of Qwen3.5's linear-attention layer between its projections (see gated_delta.cu),
// the convolution's and the rule's states updated in place. All of one dtype, bf16 or f32, but the
// rule's state (f32): qkv_proj (rows, channels) the input projection's output; conv_state (rows,
// channels, kernel - 1); conv_weight (channels, 1, kernel); z (rows, value_heads dv); a, b (rows,
// value_heads); a_log, dt_bias (value_heads); norm (dv); state (rows, value_heads, dk, dv). qkv (rows,
// channels) receives the convolution's output, out (rows, value_heads dv) the step's. All contiguous.
int groundrl_linear_attention_step(void* qkv_proj_, void* conv_state_, void* conv_weight_, void* z_,
                                   void* a_, void* b_, void* a_log_, void* dt_bias_, void* norm_,
                                   void* state_, void* qkv_, void* out_, int64_t key_heads,
                                   double l2_eps, double norm_eps) {
  return guarded([&] {
    const auto &qkv_proj = tensor(qkv_proj_), &conv_state = tensor(conv_state_);
    const auto &conv_weight = tensor(conv_weight_), &z = tensor(z_), &a = tensor(a_), &b = tensor(b_);
    const auto &a_log = tensor(a_log_), &dt_bias = tensor(dt_bias_), &norm = tensor(norm_);
    const auto &state = tensor(state_), &qkv = tensor(qkv_), &out = tensor(out_);
    const auto dtype = qkv_proj.scalar_type();
    require(dtype == at::kBFloat16 || dtype == at::kFloat, "qkv_proj must be bf16 or f32");
    for (auto [t, name] : {std::pair{&qkv_proj, "qkv_proj"}, {&conv_state, "conv_state"},
                           {&conv_weight, "conv_weight"}, {&z, "z"}, {&a, "a"}, {&b, "b"},
                           {&a_log, "a_log"}, {&dt_bias, "dt_bias"}, {&norm, "norm"}, {&qkv, "qkv"},
                           {&out, "out"}}) {
      check(*t, dtype, name);
      require(t->is_contiguous(), std::string(name) + " must be contiguous");
    }
    check(state, at::kFloat, "state");
    require(state.is_contiguous(), "state must be contiguous");
    require(state.dim() == 4, "state must be (rows, value_heads, dk, dv)");
    const int64_t rows = state.size(0), value_heads = state.size(1), dk = state.size(2),
                  dv = state.size(3);
    require(dk == 32 || dk == 64 || dk == 128, "the key dim must be 32, 64 or 128");
    require(dv >= 1 && dv * dk / 32 <= 512 && dv * dk / 32 % 32 == 0,
            "the value dim times key dim / 32 must be a multiple of 32 up to 512");
    require(key_heads > 0 && value_heads % key_heads == 0,
            "value_heads must be a multiple of key_heads");
    const int64_t channels = 2 * key_heads * dk + value_heads * dv;
    require(qkv_proj.sizes() == at::IntArrayRef({rows, channels}) && qkv.sizes() == qkv_proj.sizes(),
            "qkv_proj and qkv must be (rows, 2 key_heads dk + value_heads dv)");
    require(conv_weight.dim() == 3 && conv_weight.size(0) == channels && conv_weight.size(1) == 1 &&
                conv_weight.size(2) >= 2,
            "conv_weight must be (channels, 1, kernel >= 2)");
    const int64_t kernel = conv_weight.size(2);
    require(conv_state.sizes() == at::IntArrayRef({rows, channels, kernel - 1}),
            "conv_state must be (rows, channels, kernel - 1)");
    require(z.sizes() == at::IntArrayRef({rows, value_heads * dv}) && out.sizes() == z.sizes(),
            "z and out must be (rows, value_heads dv)");
    require(a.sizes() == at::IntArrayRef({rows, value_heads}) && b.sizes() == a.sizes(),
            "a and b must be (rows, value_heads)");
    require(a_log.sizes() == at::IntArrayRef({value_heads}) && dt_bias.sizes() == a_log.sizes(),
            "a_log and dt_bias must be (value_heads)");
    require(norm.sizes() == at::IntArrayRef({dv}), "norm must be (dv)");
    require_threads(rows * channels);
    require(rows <= 65535, "at most 65,535 rows (a block per value head and row)");
    c10::cuda::CUDAGuard guard(state.device());
    launched(groundrl_launch_linear_attention_step(
        qkv_proj.data_ptr(), conv_state.data_ptr(), conv_weight.data_ptr(), qkv.data_ptr(), kernel,
        z.data_ptr(), a.data_ptr(), b.data_ptr(), a_log.data_ptr(), dt_bias.data_ptr(),
        norm.data_ptr(), state.data_ptr<float>(), out.data_ptr(), rows, key_heads, value_heads, dk, dv,
        dtype == at::kBFloat16 ? 1 : 0, (float)l2_eps, (float)norm_eps, stream_of(state)));
  });
}

}  // extern "C"
