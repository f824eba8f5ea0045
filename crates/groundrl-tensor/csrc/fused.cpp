// A C ABI over the CUDA kernels of kernels.cu, decode_attention.cu, sampling.cu, adamw.cu and
// gated_delta.cu, for
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
#include <string>
#include <tuple>

#include "guarded.h"
#include "tensor_args.h"

extern "C" {
int groundrl_launch_decode_rotary_write(const void* qkv, int64_t qkv_row, const void* cos,
                                        const void* ssin, void* q_out, void* keys, void* values,
                                        const int64_t* column, int64_t rows, int64_t heads,
                                        int64_t kv_heads, int64_t capacity, int64_t half,
                                        void* stream);
int groundrl_launch_adamw(void* param, int param_bf16, const void* grad, float* exp_avg,
                          float* exp_avg_sq, float* master, int64_t n, const float* scalars,
                          void* stream);
int groundrl_launch_rms_norm(const void* x, int64_t x_row, const void* w, void* out, int64_t rows,
                             int64_t hidden, float eps, void* stream);
int groundrl_launch_sample(const void* logits, int bf16, int64_t rows, int64_t vocab,
                           const float* temperature, const bool* greedy, const bool* banned,
                           const float* uniforms, int64_t* tokens, float* logprobs, void* stream);
int64_t groundrl_decode_attention_splits(int64_t rows, int64_t kv_heads, int64_t capacity,
                                         int device);
int groundrl_launch_decode_attention(const void* q, const void* keys, const void* values,
                                     const void* mask, const int64_t* column, void* out,
                                     float* part_o, float* part_ml, int64_t rows, int64_t kv_heads,
                                     int64_t capacity, int64_t splits, float scale, void* stream);
int groundrl_launch_gated_delta_step(const void* q, const void* k, const void* v, const float* g,
                                     const void* beta, float* state, float* out, int64_t rows,
                                     int64_t key_heads, int64_t value_heads, int64_t dk, int64_t dv,
                                     int bf16, float eps, void* stream);
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

// One decoding step's rotation and cache write; see kernels.cu. qkv (rows, heads + 2 kv_heads, dim)
// with contiguous heads; cos, signed_sin (rows, dim) contiguous; q_out (rows, heads, dim), keys and
// values (rows, kv_heads, capacity, dim) contiguous; column a one-element int64 CUDA tensor.
int groundrl_decode_rotary_write(void* qkv_, void* cos_, void* ssin_, void* q_out_, void* keys_,
                                 void* values_, void* column_, int64_t heads) {
  return guarded([&] {
    const auto &qkv = tensor(qkv_), &cos = tensor(cos_), &ssin = tensor(ssin_);
    const auto &q_out = tensor(q_out_), &keys = tensor(keys_), &values = tensor(values_);
    const auto& column = tensor(column_);
    for (auto [t, name] : {std::pair{&qkv, "qkv"}, {&q_out, "q_out"}, {&keys, "keys"},
                           {&values, "values"}}) {
      check(*t, at::kBFloat16, name);
    }
    check(column, at::kLong, "column");
    require(column.numel() == 1, "column must hold one value");
    require(qkv.dim() == 3 && qkv.size(2) % 2 == 0 && qkv.stride(1) == qkv.size(2),
            "qkv must be (rows, heads, even dim) with contiguous heads");
    int64_t rows = qkv.size(0), dim = qkv.size(2);
    require(keys.dim() == 4 && keys.is_contiguous() && values.sizes() == keys.sizes() &&
                values.is_contiguous() && keys.size(0) == rows && keys.size(3) == dim,
            "keys and values must be contiguous (rows, kv_heads, capacity, dim)");
    int64_t kv_heads = keys.size(1), capacity = keys.size(2);
    require(qkv.size(1) == heads + 2 * kv_heads, "qkv must hold heads + 2 kv_heads heads");
    check_tables(cos, ssin, at::kBFloat16, rows, dim);
    require(q_out.sizes() == at::IntArrayRef({rows, heads, dim}) && q_out.is_contiguous(),
            "q_out must be contiguous (rows, heads, dim)");
    require_threads(rows * (heads + 2 * kv_heads) * dim / 2);
    c10::cuda::CUDAGuard guard(qkv.device());
    launched(groundrl_launch_decode_rotary_write(
        qkv.data_ptr(), qkv.stride(0), cos.data_ptr(), ssin.data_ptr(), q_out.data_ptr(),
        keys.data_ptr(), values.data_ptr(), column.data_ptr<int64_t>(), rows, heads, kv_heads,
        capacity, dim / 2, stream_of(qkv)));
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

// tokens (rows,) int64 and logprobs (rows,) f32 drawn from logits (rows, vocab) f32 or bf16
// contiguous by temperature, uniforms (rows,) f32, greedy (rows,) bool and banned (vocab,) bool; see
// sampling.cu.
int groundrl_sample(void* logits_, void* temperature_, void* greedy_, void* banned_, void* uniforms_,
                    void* tokens_, void* logprobs_) {
  return guarded([&] {
    const auto &logits = tensor(logits_), &temperature = tensor(temperature_);
    const auto &greedy = tensor(greedy_), &banned = tensor(banned_), &uniforms = tensor(uniforms_);
    const auto &tokens = tensor(tokens_), &logprobs = tensor(logprobs_);
    require(logits.scalar_type() == at::kFloat || logits.scalar_type() == at::kBFloat16,
            "logits must be f32 or bf16");
    check(logits, logits.scalar_type(), "logits");
    require(logits.dim() == 2 && logits.is_contiguous() && logits.size(1) % 4 == 0,
            "logits must be contiguous (rows, vocab a multiple of 4)");
    int64_t rows = logits.size(0), vocab = logits.size(1);
    for (auto [t, dtype, size, name] :
         {std::tuple{&temperature, at::kFloat, rows, "temperature"},
          {&uniforms, at::kFloat, rows, "uniforms"}, {&greedy, at::kBool, rows, "greedy"},
          {&banned, at::kBool, vocab, "banned"},
          {&tokens, at::kLong, rows, "tokens"}, {&logprobs, at::kFloat, rows, "logprobs"}}) {
      check(*t, dtype, name);
      require(t->dim() == 1 && t->size(0) == size && t->is_contiguous(),
              std::string(name) + " must be contiguous with " + std::to_string(size) + " values");
    }
    c10::cuda::CUDAGuard guard(logits.device());
    launched(groundrl_launch_sample(logits.data_ptr(), logits.scalar_type() == at::kBFloat16 ? 1 : 0,
                                    rows, vocab, temperature.data_ptr<float>(),
                                    greedy.data_ptr<bool>(), banned.data_ptr<bool>(),
                                    uniforms.data_ptr<float>(), tokens.data_ptr<int64_t>(),
                                    logprobs.data_ptr<float>(), stream_of(logits)));
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
// `splits` blocks per (row, KV head), or as many as fill the GPU when it is 0.
int groundrl_decode_attention(void* q_, void* keys_, void* values_, void* mask_, void* column_,
                              void* out_, int64_t splits) {
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
    c10::cuda::CUDAGuard guard(q.device());
    require(splits >= 0, "splits must not be negative");
    if (splits == 0) {
      splits = groundrl_decode_attention_splits(rows, kv_heads, capacity, q.device().index());
    }
    int64_t parts = splits > 1 ? rows * kv_heads * 8 * splits : 0;
    auto part_o = at::empty({parts * 128}, q.options().dtype(at::kFloat));
    auto part_ml = at::empty({parts * 2}, q.options().dtype(at::kFloat));
    launched(groundrl_launch_decode_attention(
        q.data_ptr(), keys.data_ptr(), values.data_ptr(), mask.data_ptr(),
        column.data_ptr<int64_t>(), out.data_ptr(), part_o.data_ptr<float>(),
        part_ml.data_ptr<float>(), rows, kv_heads, capacity, splits, 1.0f / std::sqrt(128.0f),
        stream_of(q)));
  });
}

// One decoding step of the gated delta rule (see gated_delta.cu): q, k (rows, key_heads, dk), v
// (rows, value_heads, dv) and beta (rows, value_heads), contiguous, all bf16 or all f32; g (rows,
// value_heads) f32; state (rows, value_heads, dk, dv) contiguous f32, updated in place; out (rows,
// value_heads, dv) contiguous f32. dk 32, 64 or 128, dv at most 1024.
int groundrl_gated_delta_step(void* q_, void* k_, void* v_, void* g_, void* beta_, void* state_,
                              void* out_, double eps) {
  return guarded([&] {
    const auto &q = tensor(q_), &k = tensor(k_), &v = tensor(v_), &g = tensor(g_);
    const auto &beta = tensor(beta_), &state = tensor(state_), &out = tensor(out_);
    const auto dtype = q.scalar_type();
    require(dtype == at::kBFloat16 || dtype == at::kFloat, "q must be bf16 or f32");
    for (auto [t, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}, {&beta, "beta"}}) {
      check(*t, dtype, name);
      require(t->is_contiguous(), std::string(name) + " must be contiguous");
    }
    for (auto [t, name] : {std::pair{&g, "g"}, {&state, "state"}, {&out, "out"}}) {
      check(*t, at::kFloat, name);
      require(t->is_contiguous(), std::string(name) + " must be contiguous");
    }
    require(q.dim() == 3 && k.sizes() == q.sizes(), "q and k must be (rows, key_heads, dk)");
    const int64_t rows = q.size(0), key_heads = q.size(1), dk = q.size(2);
    require(dk == 32 || dk == 64 || dk == 128, "the key dim must be 32, 64 or 128");
    require(v.dim() == 3 && v.size(0) == rows, "v must be (rows, value_heads, dv)");
    const int64_t value_heads = v.size(1), dv = v.size(2);
    require(dv >= 1 && dv <= 1024, "the value dim must be 1 to 1024");
    require(key_heads > 0 && value_heads % key_heads == 0,
            "value_heads must be a multiple of key_heads");
    require(g.sizes() == at::IntArrayRef({rows, value_heads}) && beta.sizes() == g.sizes(),
            "g and beta must be (rows, value_heads)");
    require(state.sizes() == at::IntArrayRef({rows, value_heads, dk, dv}),
            "state must be (rows, value_heads, dk, dv)");
    require(out.sizes() == v.sizes(), "out must be shaped like v");
    c10::cuda::CUDAGuard guard(q.device());
    launched(groundrl_launch_gated_delta_step(
        q.data_ptr(), k.data_ptr(), v.data_ptr(), g.data_ptr<float>(), beta.data_ptr(),
        state.data_ptr<float>(), out.data_ptr<float>(), rows, key_heads, value_heads, dk, dv,
        dtype == at::kBFloat16 ? 1 : 0, (float)eps, stream_of(q)));
  });
}

}  // extern "C"
