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
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/autograd/variable.h>

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

// The gradient accumulator of `param`, when a backward may add into its `.grad` itself as that
// accumulator would: `param` is the leaf the accumulator holds (not a copy a saved-tensor hook
// made), it has no hook the accumulator would run (the data-parallel reducer's divert and ready
// hooks, `retain_grad`, a user's), the pass accumulates into `.grad` (a `backward`, not a `grad`
// call that returns the leaf's gradient instead) and builds no graph of the gradient
// (`create_graph`, under which grad mode is on). Null otherwise. The write then happens where
// AccumulateGrad's would: on the engine's thread for the device, on the stream the forward ran on.
std::shared_ptr<torch::autograd::AccumulateGrad> accumulator(const at::Tensor& param) {
  namespace impl = torch::autograd::impl;
  if (at::GradMode::is_enabled() || !param.is_leaf() || !param.requires_grad() ||
      !impl::hooks(param).empty() || impl::post_acc_grad_hooks(param) != nullptr) {
    return nullptr;
  }
  auto node = std::dynamic_pointer_cast<torch::autograd::AccumulateGrad>(impl::try_get_grad_accumulator(param));
  if (node == nullptr || node->variable.unsafeGetTensorImpl() != param.unsafeGetTensorImpl() ||
      !node->pre_hooks().empty() || !node->tensor_pre_hooks().empty() || !node->post_hooks().empty() ||
      !node->retains_grad_hooks().empty()) {
    return nullptr;
  }
  const auto* exec = torch::autograd::get_current_graph_task_exec_info();
  if (exec == nullptr || exec->empty()) return node;
  auto it = exec->find(node.get());
  bool accumulates = it != exec->end() && it->second.needed_ && !it->second.captures_;
  return accumulates ? node : nullptr;
}

// Adds a gradient (computed by `product(out)`: out = product, or out += product) into `param`'s
// `.grad` and returns an undefined tensor, so that the engine's AccumulateGrad has nothing to add;
// where that is not allowed (`accumulator`) returns the product for AccumulateGrad to add.
template <class Product>
at::Tensor into_grad(const at::Tensor& param, Product product) {
  auto node = accumulator(param);
  if (node == nullptr) return product(at::Tensor());
  at::Tensor& grad = node->variable.mutable_grad();
  if (!grad.defined()) {
    grad = product(at::Tensor());
  } else if (grad.scalar_type() == param.scalar_type() && grad.sizes() == param.sizes() &&
             grad.is_contiguous() && !grad.requires_grad()) {
    product(grad);
  } else {
    grad.add_(product(at::Tensor()));  // in place, as AccumulateGrad adds outside create_graph
  }
  return at::Tensor();
}

// y_i = x W_i^T + b_i for x (..., in) and weights W_i (out_i, in) (biases b_i (out_i,) for all or
// none), whose backward adds each weight's and bias's gradient into its .grad itself: the weight's
// as the accumulation of the matmul that computes it (cuBLAS with beta = 1), where libtorch's linear
// records two views, the matmul and AccumulateGrad's add of a separate product (Megatron-LM's
// "gradient accumulation fusion"); the input's gradient is summed over the projections the same way
// (one buffer the matmuls add into) where the composition adds one product to another. For the
// projections that read one input (q|k|v, gate|up): one autograd node instead of four each and an
// add per extra projection, and no pass over the gradients per micro-batch. The product is added to
// the bf16 gradient in the matmul's epilogue (beta = 1) where the composition adds it with a
// separate kernel; the CUDA test bounds the result within a bf16 unit of the f32 sum (at its sizes
// it came out equal to the composition's bit for bit).
struct AccumulatingLinear : public torch::autograd::Function<AccumulatingLinear> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList weights,
                               at::TensorList biases) {
    variable_list saved{x};
    variable_list outs;
    for (size_t i = 0; i < weights.size(); ++i) {
      std::optional<at::Tensor> bias;
      if (!biases.empty()) bias = biases[i];
      outs.push_back(at::linear(x, weights[i], bias));
      saved.push_back(weights[i]);
    }
    saved.insert(saved.end(), biases.begin(), biases.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["parts"] = static_cast<int64_t>(weights.size());
    return outs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    int64_t parts = ctx->saved_data["parts"].toInt();
    bool biased = static_cast<int64_t>(saved.size()) > 1 + parts;
    const at::Tensor& x = saved[0];
    int64_t in = x.size(-1);
    at::Tensor rows = x.reshape({-1, in});
    variable_list result(1 + 2 * parts);
    at::Tensor grad_x;
    for (int64_t i = 0; i < parts; ++i) {
      const at::Tensor& weight = saved[1 + i];
      at::Tensor grad = grads[i].reshape({-1, weight.size(0)});
      if (ctx->needs_input_grad(0)) {
        grad_x = grad_x.defined() ? grad_x.addmm_(grad, weight) : at::mm(grad, weight);
      }
      if (ctx->needs_input_grad(1 + i)) {
        result[1 + i] = into_grad(weight, [&](at::Tensor acc) -> at::Tensor {
          return acc.defined() ? acc.addmm_(grad.t(), rows) : at::mm(grad.t(), rows);
        });
      }
      if (biased && ctx->needs_input_grad(1 + parts + i)) {
        result[1 + parts + i] = into_grad(saved[1 + parts + i], [&](at::Tensor acc) -> at::Tensor {
          return acc.defined() ? acc.add_(grad.sum(0)) : grad.sum(0);
        });
      }
    }
    if (grad_x.defined()) result[0] = grad_x.view(x.sizes());
    if (!biased) result.resize(1 + parts);
    return result;
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

// out[0..parts] = new handles of x W_i^T + b_i (AccumulatingLinear) for x (..., in), weights[i]
// (out_i, in) and biases[i] (out_i,), or biases null for none, all of one floating dtype on one
// device.
int groundrl_linear(void* x_, void* const* weights_, void* const* biases_, int64_t parts, void** out) {
  return guarded([&] {
    const auto& x = tensor(x_);
    require(parts >= 1 && x.dim() >= 1, "one weight at least, and x (..., in)");
    std::vector<at::Tensor> weights, biases;
    for (int64_t i = 0; i < parts; ++i) {
      const auto& weight = tensor(weights_[i]);
      require(weight.dim() == 2 && weight.size(1) == x.size(-1), "each weight must be (out, in) for x (..., in)");
      weights.push_back(weight);
      if (biases_ != nullptr) {
        const auto& bias = tensor(biases_[i]);
        require(bias.dim() == 1 && bias.size(0) == weight.size(0), "each bias must be (out,) of its weight");
        biases.push_back(bias);
      }
    }
    for (const auto& t : weights) {
      require(t.scalar_type() == x.scalar_type() && t.device() == x.device(),
              "x and the weights must share a dtype and a device");
    }
    variable_list outs = AccumulatingLinear::apply(x, at::TensorList(weights), at::TensorList(biases));
    for (size_t i = 0; i < outs.size(); ++i) out[i] = new at::Tensor(outs[i]);
  });
}

}  // extern "C"
