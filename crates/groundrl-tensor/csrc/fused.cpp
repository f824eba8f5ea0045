// A C ABI over the CUDA kernels of kernels.cu and decode_attention.cu, for tensors: checks devices, dtypes and layouts
// (a C++ exception, turned into an error message, rather than a kernel reading out of bounds) and
// launches on libtorch's current stream, so the kernels join captured CUDA graphs like any ATen op.
// The caller allocates the outputs.

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "guarded.h"

extern "C" {
int groundrl_launch_vision_rotary(const void* x, int64_t x_row, int64_t x_head, const float* cos,
                                  const float* ssin, void* out, int64_t rows, int64_t heads,
                                  int64_t half, void* stream);
int groundrl_launch_decode_rotary_write(const void* qkv, int64_t qkv_row, const void* cos,
                                        const void* ssin, void* q_out, void* keys, void* values,
                                        const int64_t* column, int64_t rows, int64_t heads,
                                        int64_t kv_heads, int64_t capacity, int64_t half,
                                        void* stream);
int groundrl_launch_silu_mul(const void* gate, int64_t gate_row, const void* up, int64_t up_row,
                             void* out, int64_t rows, int64_t cols, void* stream);
int64_t groundrl_decode_attention_splits(int64_t rows, int64_t kv_heads, int64_t capacity,
                                         int device);
int groundrl_launch_decode_attention(const void* q, const void* keys, const void* values,
                                     const void* mask, const int64_t* column, void* out,
                                     float* part_o, float* part_ml, int64_t rows, int64_t kv_heads,
                                     int64_t capacity, int64_t splits, float scale, void* stream);
const char* groundrl_cuda_error_string(int code);
}

namespace {

using groundrl::guarded;

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

// A CUDA tensor of `dtype` whose last dimension is contiguous.
void check(const at::Tensor& t, at::ScalarType dtype, const char* name) {
  require(t.is_cuda(), std::string(name) + " is not on a CUDA device");
  require(t.scalar_type() == dtype, std::string(name) + " has dtype " +
                                        std::string(c10::toString(t.scalar_type())) + ", not " +
                                        std::string(c10::toString(dtype)));
  require(t.dim() == 0 || t.stride(-1) == 1, std::string(name) + "'s last dimension is strided");
}

// cos and signed_sin: contiguous (rows, dim) tables of `dtype`.
void check_tables(const at::Tensor& cos, const at::Tensor& ssin, at::ScalarType dtype, int64_t rows,
                  int64_t dim) {
  check(cos, dtype, "cos");
  check(ssin, dtype, "signed_sin");
  require(cos.sizes() == at::IntArrayRef({rows, dim}) && cos.is_contiguous() &&
              ssin.sizes() == cos.sizes() && ssin.is_contiguous(),
          "cos and signed_sin must be contiguous (rows, dim)");
}

void* stream_of(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

void launched(int code) {
  if (code != 0) throw std::runtime_error(groundrl_cuda_error_string(code));
}

const at::Tensor& tensor(void* t) { return *static_cast<at::Tensor*>(t); }

// The kernels index threads with 32 bits.
void require_threads(int64_t threads) {
  require(threads < (int64_t(1) << 31), "too many elements for one launch: " + std::to_string(threads));
}

}  // namespace

extern "C" {

// out (rows, heads, dim) contiguous = the vision rotation of x (rows, heads, dim), strided in rows
// and heads, by cos and signed_sin (rows, dim) f32 contiguous.
int groundrl_vision_rotary(void* x_, void* cos_, void* ssin_, void* out_) {
  return guarded([&] {
    const auto &x = tensor(x_), &cos = tensor(cos_), &ssin = tensor(ssin_), &out = tensor(out_);
    check(x, at::kBFloat16, "x");
    check(out, at::kBFloat16, "out");
    require(x.dim() == 3 && x.size(2) % 2 == 0, "x must be (rows, heads, even dim)");
    int64_t rows = x.size(0), heads = x.size(1), dim = x.size(2);
    check_tables(cos, ssin, at::kFloat, rows, dim);
    require(out.sizes() == x.sizes() && out.is_contiguous(), "out must be contiguous like x");
    require_threads(rows * heads * dim / 2);
    c10::cuda::CUDAGuard guard(x.device());
    launched(groundrl_launch_vision_rotary(x.data_ptr(), x.stride(0), x.stride(1),
                                           cos.data_ptr<float>(), ssin.data_ptr<float>(),
                                           out.data_ptr(), rows, heads, dim / 2, stream_of(x)));
  });
}

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

// out (rows, cols) contiguous = silu(gate) * up, gate and up (rows, cols) strided in rows.
int groundrl_silu_mul(void* gate_, void* up_, void* out_) {
  return guarded([&] {
    const auto &gate = tensor(gate_), &up = tensor(up_), &out = tensor(out_);
    check(gate, at::kBFloat16, "gate");
    check(up, at::kBFloat16, "up");
    check(out, at::kBFloat16, "out");
    require(gate.dim() == 2 && up.sizes() == gate.sizes(), "gate and up must be (rows, cols)");
    require(out.sizes() == gate.sizes() && out.is_contiguous(), "out must be contiguous like gate");
    require_threads(gate.numel());
    c10::cuda::CUDAGuard guard(gate.device());
    launched(groundrl_launch_silu_mul(gate.data_ptr(), gate.stride(0), up.data_ptr(), up.stride(0),
                                      out.data_ptr(), gate.size(0), gate.size(1),
                                      stream_of(gate)));
  });
}

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
    require(capacity % 8 == 0, "the capacity must be a multiple of 8 (the mask is read 16 bytes at a time)");
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

}  // extern "C"
