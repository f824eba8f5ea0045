// What the kernel shims (fused.cpp, autograd.cpp) share to check their tensors and launch: a failed
// check or launch throws, which guarded.h turns into an error code and message for the Rust side.

#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>
#include <stdexcept>
#include <string>

extern "C" const char* groundrl_cuda_error_string(int code);

namespace groundrl {

inline void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

// A CUDA tensor of `dtype` whose last dimension is contiguous.
inline void check(const at::Tensor& t, at::ScalarType dtype, const char* name) {
  require(t.is_cuda(), std::string(name) + " is not on a CUDA device");
  require(t.scalar_type() == dtype, std::string(name) + " has dtype " +
                                        std::string(c10::toString(t.scalar_type())) + ", not " +
                                        std::string(c10::toString(dtype)));
  require(t.dim() == 0 || t.stride(-1) == 1, std::string(name) + "'s last dimension is strided");
}

// libtorch's current stream on `t`'s device: kernels launched there join captured CUDA graphs.
inline void* stream_of(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

// Throws the CUDA error of a launcher's return code.
inline void launched(int code) {
  if (code != 0) throw std::runtime_error(groundrl_cuda_error_string(code));
}

// The tensor behind a handle the Rust side passed (tch's `at::Tensor*`).
inline const at::Tensor& tensor(void* t) { return *static_cast<at::Tensor*>(t); }

// The kernels index threads with 32 bits.
inline void require_threads(int64_t threads) {
  require(threads < (int64_t(1) << 31), "too many elements for one launch: " + std::to_string(threads));
}

}  // namespace groundrl
