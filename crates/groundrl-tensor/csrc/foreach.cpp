// A C ABI over libtorch's multi-tensor ("foreach") operations, which tch does not bind: an optimizer
// step's passes over every gradient or parameter (their norms, zeroing) in a few launches instead of
// one or more per tensor; with a model's hundreds of tensors, the per-tensor launches kept the GPU
// waiting on the host at the end of every update.

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "guarded.h"
#include "tensor_args.h"

namespace {

std::vector<at::Tensor> tensors_of(void** handles, int64_t n) {
  std::vector<at::Tensor> tensors;
  tensors.reserve(n);
  for (int64_t i = 0; i < n; ++i) tensors.push_back(groundrl::tensor(handles[i]));
  return tensors;
}

}  // namespace

extern "C" {

// out (n,) f32 = the `ord`-norm of each of the n tensors, computed in f32 (`at::_foreach_norm`).
int groundrl_foreach_norm(void** handles, int64_t n, double ord, void* out_) {
  using namespace groundrl;
  return guarded([&] {
    const auto& out = tensor(out_);
    require(out.numel() == n && out.scalar_type() == at::kFloat, "out must hold one f32 per tensor");
    const auto norms = at::_foreach_norm(tensors_of(handles, n), ord, at::kFloat);
    out.copy_(at::stack(norms).view(out.sizes()));
  });
}

// Zeros the n tensors in place (`at::_foreach_zero_`).
int groundrl_foreach_zero(void** handles, int64_t n) {
  return groundrl::guarded([&] { at::_foreach_zero_(tensors_of(handles, n)); });
}

// Drops the gradient of each of the n tensors (undefined afterwards, as torch's
// `zero_grad(set_to_none=True)`): the next backward hands each its new gradient instead of adding it
// to zeros.
int groundrl_release_grads(void** handles, int64_t n) {
  using namespace groundrl;
  return guarded([&] {
    for (int64_t i = 0; i < n; ++i) tensor(handles[i]).mutable_grad().reset();
  });
}

}  // extern "C"
