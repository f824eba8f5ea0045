// A C ABI over libtorch's flash attention for packed variable-length sequences
// (`at::_flash_attention_forward` with cumulative sequence lengths, FlashAttention-2's varlen
// kernels), which tch does not bind. Causal masks of sequences whose keys outnumber their queries are
// aligned at the bottom right: query i of a sequence of q queries and k keys sees keys 0..=k-q+i.
// The op records libtorch's own backward (`FlashAttentionBackward0`), so the result is
// differentiable like any ATen op.

#include <ATen/ATen.h>

#include <cstdint>
#include <tuple>

#include "guarded.h"
#include "tensor_args.h"

extern "C" {

// *out = a new handle of attention within packed sequences, causal or not: q (total_q, heads, dim), k and v
// (total_k, kv_heads, dim) with kv_heads dividing heads (each KV head serving heads / kv_heads query
// heads, as the flash kernels take them), bf16 or f16 on one CUDA device with contiguous last
// dimensions; cu_q and
// cu_k (sequences + 1,) int32 on that device, the sequences' first rows and the total; max_q, max_k
// the longest sequence's rows; softmax scaled by `scale`.
int groundrl_flash_varlen(void* q_, void* k_, void* v_, void* cu_q_, void* cu_k_, int64_t max_q,
                          int64_t max_k, double scale, int causal, void** out) {
  using namespace groundrl;
  return guarded([&] {
    const auto &q = tensor(q_), &k = tensor(k_), &v = tensor(v_);
    const auto &cu_q = tensor(cu_q_), &cu_k = tensor(cu_k_);
    auto dtype = q.scalar_type();
    require(dtype == at::kBFloat16 || dtype == at::kHalf, "q must be bf16 or f16");
    for (auto [t, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
      check(*t, dtype, name);
      require(t->dim() == 3 && t->device() == q.device(), std::string(name) +
                                                              " must be (rows, heads, dim) on q's device");
    }
    require(k.sizes() == v.sizes() && k.size(1) > 0 && q.size(1) % k.size(1) == 0 &&
                k.size(2) == q.size(2),
            "k and v must be (total_k, kv_heads, dim) with kv_heads dividing q's heads, and q's dim");
    for (auto [t, name] : {std::pair{&cu_q, "cu_q"}, {&cu_k, "cu_k"}}) {
      check(*t, at::kInt, name);
      require(t->dim() == 1 && t->is_contiguous() && t->device() == q.device(),
              std::string(name) + " must be a contiguous int32 vector on q's device");
    }
    require(cu_q.size(0) == cu_k.size(0) && cu_q.size(0) >= 2, "cu_q and cu_k must list one sequence or more");
    auto result = at::_flash_attention_forward(q, k, v, cu_q, cu_k, max_q, max_k, 0.0,
                                               /*is_causal=*/causal != 0, /*return_debug_mask=*/false, scale);
    *out = new at::Tensor(std::get<0>(result));
  });
}

// *out = a new handle of a page-locked copy of the CPU tensor t (libtorch's caching host
// allocator), from which a copy to a CUDA device is queued without waiting for the stream. Not
// `pin_memory(device)`, whose device argument libtorch deprecates with a warning at every call.
int groundrl_pin_memory(void* t_, void** out) {
  using namespace groundrl;
  return guarded([&] {
    const auto& t = tensor(t_);
    require(t.device().is_cpu(), "only a CPU tensor can be pinned");
    *out = new at::Tensor(t.pin_memory());
  });
}

}  // extern "C"
