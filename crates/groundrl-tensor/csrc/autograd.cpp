// Kernels of kernels.cu as libtorch autograd functions, so that training (a recomputed block, the
// loss's backward) runs them too, not only rollouts: each is a torch::autograd::Function whose forward
// and backward are one kernel each, where libtorch's composition records five to ten operations and
// as many full passes over the activations. Without autograd (no-grad mode, or no input requiring a
// gradient) the same call runs the forward kernel alone and records nothing.
//
// Both reproduce the rounding of the composition they replace, forward and backward (see
// kernels.cu); the crate's CUDA tests compare outputs and gradients with libtorch's autograd. The
// backward passes are raw kernels, so they are first-order only: a graph of the gradient itself
// (`create_graph`) does not go through them, which RL training never asks for.
// Outputs reach Rust as new `at::Tensor*` handles, which tch's `Tensor::from_ptr` takes over.

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>
#include <string>

#include "guarded.h"
#include "tensor_args.h"

extern "C" {
int groundrl_launch_rotary(int backward, int bf16_tables, const void* const* src, int64_t src_row,
                           int64_t src_head, void* const* dst, int64_t dst_row, int64_t dst_head,
                           int parts, int rotated, const void* cos, const void* ssin, int64_t rows,
                           int64_t heads, int64_t half, void* stream);
int groundrl_launch_silu_mul(const void* gate, int64_t gate_row, const void* up, int64_t up_row,
                             void* out, int64_t rows, int64_t cols, void* stream);
int groundrl_launch_silu_mul_backward(const void* gate, int64_t gate_row, const void* up,
                                      int64_t up_row, const void* grad, int64_t grad_row,
                                      void* grad_gate, void* grad_up, int64_t rows, int64_t cols,
                                      void* stream);
}

namespace {

using namespace groundrl;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// x (rows, parts, heads, dim) -> `parts` contiguous (rows, heads, dim) tensors, the first `rotated`
// turned by cos and signed_sin (rows, dim), the others copied; see kernels.cu's `rotary` for the two
// roundings (f32 tables: the vision tower; bf16 tables: the decoder). The tables take no gradient.
struct Rotary : public torch::autograd::Function<Rotary> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                               const at::Tensor& ssin, int64_t rotated) {
    int64_t rows = x.size(0), parts = x.size(1), heads = x.size(2), dim = x.size(3);
    ctx->save_for_backward({cos, ssin});
    ctx->saved_data["shape"] = std::vector<int64_t>{parts, heads, rotated};
    variable_list outs;
    const void* src[3] = {};
    void* dst[3] = {};
    for (int64_t p = 0; p < parts; ++p) {
      outs.push_back(at::empty({rows, heads, dim}, x.options()));
      src[p] = static_cast<const char*>(x.data_ptr()) + p * x.stride(1) * x.element_size();
      dst[p] = outs[p].data_ptr();
    }
    launch(0, src, x.stride(0), x.stride(2), dst, heads * dim, cos, ssin, parts, rotated, heads);
    return outs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto shape = ctx->saved_data["shape"].toIntVector();
    int64_t parts = shape[0], heads = shape[1], rotated = shape[2];
    const at::Tensor &cos = saved[0], &ssin = saved[1];
    int64_t rows = cos.size(0), dim = cos.size(1);
    at::Tensor grad_x = at::empty({rows, parts, heads, dim}, cos.options().dtype(at::kBFloat16));
    const void* src[3] = {};
    void* dst[3] = {};
    for (int64_t p = 0; p < parts; ++p) {
      if (grads[p].defined()) {
        grads[p] = grads[p].contiguous();
        src[p] = grads[p].data_ptr();
      }
      dst[p] = static_cast<char*>(grad_x.data_ptr()) + p * heads * dim * grad_x.element_size();
    }
    launch(1, src, heads * dim, dim, dst, parts * heads * dim, cos, ssin, parts, rotated, heads);
    return {grad_x, at::Tensor(), at::Tensor(), at::Tensor()};
  }

  // One launch over `parts` sources of (rows, heads, dim) with the given row and head strides into
  // destinations of contiguous heads `dst_row` apart.
  static void launch(int backward, const void* const* src, int64_t src_row, int64_t src_head,
                     void* const* dst, int64_t dst_row, const at::Tensor& cos, const at::Tensor& ssin,
                     int64_t parts, int64_t rotated, int64_t heads) {
    int64_t dim = cos.size(1);
    c10::cuda::CUDAGuard guard(cos.device());
    launched(groundrl_launch_rotary(backward, cos.scalar_type() == at::kBFloat16 ? 1 : 0, src,
                                    src_row, src_head, dst, dst_row, dim, (int)parts, (int)rotated,
                                    cos.data_ptr(), ssin.data_ptr(), cos.size(0), heads, dim / 2,
                                    stream_of(cos)));
  }
};

// SwiGLU's silu(gate) * up for gate and up (rows, cols), rows strided; output contiguous.
struct Swiglu : public torch::autograd::Function<Swiglu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    ctx->save_for_backward({gate, up});
    at::Tensor out = at::empty(gate.sizes(), gate.options());
    c10::cuda::CUDAGuard guard(gate.device());
    launched(groundrl_launch_silu_mul(gate.data_ptr(), gate.stride(0), up.data_ptr(), up.stride(0),
                                      out.data_ptr(), gate.size(0), gate.size(1),
                                      stream_of(gate)));
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &gate = saved[0], &up = saved[1];
    at::Tensor grad = grads[0].contiguous();
    at::Tensor grad_gate = at::empty(gate.sizes(), gate.options());
    at::Tensor grad_up = at::empty(gate.sizes(), gate.options());
    c10::cuda::CUDAGuard guard(gate.device());
    launched(groundrl_launch_silu_mul_backward(
        gate.data_ptr(), gate.stride(0), up.data_ptr(), up.stride(0), grad.data_ptr(),
        grad.size(1), grad_gate.data_ptr(), grad_up.data_ptr(), gate.size(0), gate.size(1),
        stream_of(gate)));
    return {grad_gate, grad_up};
  }
};

}  // namespace

extern "C" {

// out[0..parts] = new handles of the parts of x (rows, parts <= 3, heads, even dim), bf16 with a
// contiguous last dimension: the first `rotated` turned by cos and signed_sin, contiguous (rows, dim)
// tables of f32 or bf16 on x's device; see Rotary.
int groundrl_rotary(void* x_, void* cos_, void* ssin_, int64_t rotated, void** out) {
  return guarded([&] {
    const auto &x = tensor(x_), &cos = tensor(cos_), &ssin = tensor(ssin_);
    check(x, at::kBFloat16, "x");
    require(x.dim() == 4 && x.size(1) >= 1 && x.size(1) <= 3 && x.size(3) % 2 == 0,
            "x must be (rows, 1 to 3 parts, heads, even dim)");
    require(rotated >= 0 && rotated <= x.size(1), "rotated must be at most the number of parts");
    int64_t rows = x.size(0), dim = x.size(3);
    auto table = cos.scalar_type();
    require(table == at::kFloat || table == at::kBFloat16, "cos must be f32 or bf16");
    for (const auto* t : {&cos, &ssin}) {
      require(t->is_cuda() && t->scalar_type() == table && t->is_contiguous() &&
                  t->sizes() == at::IntArrayRef({rows, dim}) && t->device() == x.device(),
              "cos and signed_sin must be contiguous (rows, dim) of one dtype on x's device");
    }
    require_threads(rows * x.size(1) * x.size(2) * dim / 2);
    variable_list outs = Rotary::apply(x, cos, ssin, rotated);
    for (size_t i = 0; i < outs.size(); ++i) out[i] = new at::Tensor(outs[i]);
  });
}

// *out = a new handle of silu(gate) * up for gate and up (rows, cols) bf16 of one shape on one
// device, rows strided.
int groundrl_swiglu(void* gate_, void* up_, void** out) {
  return guarded([&] {
    const auto &gate = tensor(gate_), &up = tensor(up_);
    check(gate, at::kBFloat16, "gate");
    check(up, at::kBFloat16, "up");
    require(gate.dim() == 2 && up.sizes() == gate.sizes() && up.device() == gate.device(),
            "gate and up must be (rows, cols) of one shape on one device");
    require_threads(gate.numel());
    *out = new at::Tensor(Swiglu::apply(gate, up));
  });
}

}  // extern "C"
