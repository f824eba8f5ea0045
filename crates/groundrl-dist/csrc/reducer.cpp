// The gradient reducer: sums parameters' gradients over the ranks while the backward pass still
// runs, as PyTorch DDP's reducer does, so that communication hides behind the rest of the backward.
//
// A post-accumulate-grad hook on each parameter (torch::autograd::impl::set_post_acc_grad_hooks,
// torch/csrc/autograd/variable.h of libtorch 2.11.0; AccumulateGrad calls it after adding to the
// parameter's .grad) tells the reducer that autograd reached the parameter. The parameters are
// grouped into buckets (src/reducer.rs plans them), each with one flat buffer. Once every parameter
// of the next bucket is ready, its all-reduce is started on the buffer (c10d's Backend::allreduce
// returns a Work at once). Buckets start strictly in order, so every rank issues the same collectives
// in the same order, whatever order its own backward reaches them in.
//
// Memory: a parameter's gradient becomes a view of its slot in the bucket's buffer when the bucket
// first starts (its values copied there once), and autograd then accumulates into that view, so the
// buffers are the gradients and cost no memory of their own (DDP's gradient_as_bucket_view). The sum
// is computed in place.
//
// The hooks act only while armed: the caller arms them for the last backward pass of a gradient
// accumulation, so earlier passes only accumulate. A parameter is ready once its hook has fired as
// often as in the last armed pass that reached it (a backward pass made of several autograd calls can
// reach a parameter in more than one of them); until an armed pass has
// reached it, never (its bucket starts after the backward pass), so the first armed pass only learns.
//
// A gradient that arrives after its bucket started (a pass that reaches a parameter more often than
// the last one did) must not be added to a buffer that a collective is reducing: a tensor pre-hook
// (torch::autograd::impl::add_hook) diverts it to a side tensor instead, AccumulateGrad skips the
// undefined gradient it gets, and `finish` reduces the diverted gradients of such a bucket on every
// rank and adds them to its sums.
//
// Hooks run on autograd's threads and must not throw through the engine: an error is kept and
// reported by the next call from the caller (`launch_rest`).

#include "shim.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

namespace {

using groundrl_dist::Group;
using torch::autograd::variable_list;
using torch::autograd::impl::post_acc_grad_hooks;
using torch::autograd::impl::set_post_acc_grad_hooks;

struct Bucket {
  // Indices of the parameters, and where each starts in the flat buffer.
  std::vector<int64_t> members;
  std::vector<int64_t> offsets;
  int64_t numel = 0;
  // Members not yet ready in this pass.
  size_t waiting = 0;
  // The gradients of the members, made when the bucket first starts and kept.
  at::Tensor buffer;
  // The collective of this pass; null until the bucket starts.
  c10::intrusive_ptr<c10d::Work> work;
  // A member's gradient arrived after the bucket started.
  bool stale = false;
};

class Reducer;

// After AccumulateGrad: the parameter was reached.
class ReadyHook final : public torch::autograd::PostAccumulateGradHook {
 public:
  ReadyHook(Reducer* reducer, size_t index) : reducer_(reducer), index_(index) {}
  void operator()(const torch::autograd::Variable& /*param*/) override;
  const Reducer* reducer() const { return reducer_; }

 private:
  Reducer* reducer_;
  size_t index_;
};

// Before AccumulateGrad: diverts a gradient whose bucket has started.
class DivertHook final : public torch::autograd::FunctionPreHook {
 public:
  DivertHook(Reducer* reducer, size_t index) : reducer_(reducer), index_(index) {}
  variable_list operator()(const variable_list& grads) override;
  const Reducer* reducer() const { return reducer_; }

 private:
  Reducer* reducer_;
  size_t index_;
};

class Reducer {
 public:
  Reducer(const Group& group, std::vector<at::Tensor> params);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  void set_layout(const int64_t* order, const int64_t* ends, size_t buckets);
  bool holds(at::Tensor* const* params, size_t n) const;
  void arm(std::chrono::milliseconds timeout);
  void accumulated(size_t index) noexcept;
  variable_list arriving(size_t index, const variable_list& grads) noexcept;
  size_t launch_rest(std::chrono::milliseconds timeout);
  void flags(int64_t* out);
  size_t ready_order(int64_t* out);
  void finish(const int64_t* anywhere, const int64_t* stale);

 private:
  void launch_ready() noexcept;
  void launch(Bucket& bucket);
  void add_late(const int64_t* stale);
  void reset();
  at::Tensor slot(const at::Tensor& flat, const Bucket& bucket, size_t member) const;

  Group group_;
  std::vector<at::Tensor> params_;
  std::vector<size_t> bucket_of_;
  std::vector<Bucket> buckets_;
  // Hook calls of each parameter in this pass, and in the last armed pass that reached it (0: none
  // has yet).
  std::vector<int> fired_;
  std::vector<int> expected_;
  // Gradients that arrived after their bucket started, in this pass.
  std::vector<at::Tensor> late_;
  // Parameters in the order this pass first reached them.
  std::vector<int64_t> ready_order_;
  size_t next_ = 0;
  std::atomic<bool> armed_{false};
  bool armed_pass_ = false;
  std::string error_;
  std::chrono::milliseconds timeout_{0};
  std::mutex mutex_;
};

void ReadyHook::operator()(const torch::autograd::Variable& /*param*/) {
  reducer_->accumulated(index_);
}

variable_list DivertHook::operator()(const variable_list& grads) {
  return reducer_->arriving(index_, grads);
}

Reducer::Reducer(const Group& group, std::vector<at::Tensor> params)
    : group_(group), params_(std::move(params)) {
  std::unordered_set<const c10::TensorImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& param = params_[i];
    TORCH_CHECK(param.requires_grad() && param.is_leaf(), "parameter ", i,
                " is not a leaf tensor that requires a gradient");
    TORCH_CHECK(seen.insert(param.unsafeGetTensorImpl()).second, "parameter ", i,
                " is given twice");
    TORCH_CHECK(post_acc_grad_hooks(param) == nullptr && torch::autograd::impl::hooks(param).empty(),
                "parameter ", i, " already has gradient hooks");
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    set_post_acc_grad_hooks(params_[i], std::make_unique<ReadyHook>(this, i));
    torch::autograd::impl::add_hook(params_[i], std::make_unique<DivertHook>(this, i));
  }
  fired_.assign(params_.size(), 0);
  expected_.assign(params_.size(), 0);
  late_.resize(params_.size());
}

Reducer::~Reducer() {
  for (const at::Tensor& param : params_) {
    const auto* ready = dynamic_cast<const ReadyHook*>(post_acc_grad_hooks(param).get());
    if (ready != nullptr && ready->reducer() == this) set_post_acc_grad_hooks(param, nullptr);
    auto& hooks = torch::autograd::impl::hooks(param);
    hooks.erase(std::remove_if(hooks.begin(), hooks.end(),
                               [this](const auto& hook) {
                                 const auto* divert = dynamic_cast<const DivertHook*>(hook.get());
                                 return divert != nullptr && divert->reducer() == this;
                               }),
                hooks.end());
  }
}

// `order`: every parameter index once; bucket k holds order[ends[k - 1]..ends[k]], one dtype and
// device each (its buffer's). Only before any bucket has started: gradients are views of the
// buffers from then on.
void Reducer::set_layout(const int64_t* order, const int64_t* ends, size_t buckets) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Bucket& bucket : buckets_) {
    TORCH_CHECK(!bucket.buffer.defined(), "the bucket layout changes only before any bucket starts");
  }
  const size_t n = params_.size();
  std::vector<size_t> bucket_of(n, buckets);
  std::vector<Bucket> laid(buckets);
  int64_t start = 0;
  for (size_t k = 0; k < buckets; ++k) {
    TORCH_CHECK(ends[k] > start && static_cast<size_t>(ends[k]) <= n, "bad bucket ends");
    for (int64_t j = start; j < ends[k]; ++j) {
      const int64_t i = order[j];
      TORCH_CHECK(i >= 0 && static_cast<size_t>(i) < n && bucket_of[i] == buckets,
                  "the order is not a permutation of the parameters");
      const at::Tensor& first = params_[order[start]];
      TORCH_CHECK(params_[i].scalar_type() == first.scalar_type() &&
                      params_[i].device() == first.device(),
                  "bucket ", k, " mixes dtypes or devices");
      bucket_of[i] = k;
      laid[k].members.push_back(i);
      laid[k].offsets.push_back(laid[k].numel);
      laid[k].numel += params_[i].numel();
    }
    laid[k].waiting = laid[k].members.size();
    start = ends[k];
  }
  TORCH_CHECK(static_cast<size_t>(start) == n, "the buckets do not cover every parameter");
  bucket_of_ = std::move(bucket_of);
  buckets_ = std::move(laid);
}

// Whether the hooks are on exactly these tensors, in this order.
bool Reducer::holds(at::Tensor* const* params, size_t n) const {
  if (n != params_.size()) return false;
  for (size_t i = 0; i < n; ++i) {
    if (params[i]->unsafeGetTensorImpl() != params_[i].unsafeGetTensorImpl()) return false;
  }
  return true;
}

void Reducer::arm(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(!armed_ && next_ == 0, "the hooks are armed already");
  timeout_ = timeout;
  ready_order_.clear();
  armed_pass_ = true;
  armed_ = true;
}

// The post-accumulate hook of parameter `index`: autograd has just added to its gradient (or
// skipped a diverted one).
void Reducer::accumulated(size_t index) noexcept {
  if (!armed_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_ || !error_.empty()) return;
  if (fired_[index]++ == 0) ready_order_.push_back(static_cast<int64_t>(index));
  Bucket& bucket = buckets_[bucket_of_[index]];
  if (bucket.work) {
    bucket.stale = true;
    return;
  }
  if (fired_[index] == expected_[index] && --bucket.waiting == 0) launch_ready();
}

// The pre-hook of parameter `index`: keeps a gradient away from a buffer being reduced. A bucket
// cannot start between this and AccumulateGrad: a device's autograd nodes run on one thread.
variable_list Reducer::arriving(size_t index, const variable_list& grads) noexcept {
  if (!armed_.load(std::memory_order_acquire)) return grads;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_ || !buckets_[bucket_of_[index]].work || grads.empty() || !grads[0].defined()) {
    return grads;
  }
  const int failed = groundrl_dist::guarded([&] {
    at::NoGradGuard no_grad;
    at::Tensor& late = late_[index];
    late = late.defined() ? late + grads[0] : grads[0].clone();
  });
  if (failed != 0) error_ = groundrl_dist::last_error();
  return variable_list(grads.size());
}

// Starts the next buckets while they are ready; an error is kept for `launch_rest`.
void Reducer::launch_ready() noexcept {
  const int failed = groundrl_dist::guarded([&] {
    for (; next_ < buckets_.size() && buckets_[next_].waiting == 0; ++next_) {
      launch(buckets_[next_]);
    }
  });
  if (failed != 0) error_ = groundrl_dist::last_error();
}

// Member `member` of `bucket` in `flat`, shaped as its parameter.
at::Tensor Reducer::slot(const at::Tensor& flat, const Bucket& bucket, size_t member) const {
  const at::Tensor& param = params_[bucket.members[member]];
  return flat.narrow(0, bucket.offsets[member], param.numel()).view(param.sizes());
}

// Moves the gradients that are not yet views of the bucket's buffer into it (zeros for a parameter
// without one, which keeps none), and starts the buffer's all-reduce.
void Reducer::launch(Bucket& bucket) {
  at::NoGradGuard no_grad;
  if (!bucket.buffer.defined()) {
    const at::Tensor& first = params_[bucket.members.front()];
    bucket.buffer = at::zeros({bucket.numel}, first.options());
  }
  for (size_t m = 0; m < bucket.members.size(); ++m) {
    at::Tensor& param = params_[bucket.members[m]];
    at::Tensor view = slot(bucket.buffer, bucket, m);
    at::Tensor& grad = param.mutable_grad();
    if (!grad.defined()) {
      view.zero_();
    } else if (!grad.is_alias_of(bucket.buffer) || grad.data_ptr() != view.data_ptr()) {
      view.copy_(grad);
      grad = view;
    }
  }
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::SUM;
  options.timeout = timeout_;
  std::vector<at::Tensor> tensors{bucket.buffer};
  bucket.work = group_.backend->allreduce(tensors, options);
}

// After the backward pass: disarms the hooks and starts the buckets it did not start, in order.
// Returns how many it had started.
size_t Reducer::launch_rest(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = false;
  TORCH_CHECK(error_.empty(), error_);
  timeout_ = timeout;
  const size_t started = next_;
  for (; next_ < buckets_.size(); ++next_) launch(buckets_[next_]);
  return started;
}

// Writes, for each parameter, 1 when it has a gradient here (accumulated or diverted), then for each
// bucket 1 when it went stale.
void Reducer::flags(int64_t* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < params_.size(); ++i) {
    out[i] = params_[i].grad().defined() || late_[i].defined() ? 1 : 0;
  }
  for (size_t k = 0; k < buckets_.size(); ++k) out[params_.size() + k] = buckets_[k].stale ? 1 : 0;
}

// The parameters in the order the last armed pass first reached them; returns how many it reached.
size_t Reducer::ready_order(int64_t* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::copy(ready_order_.begin(), ready_order_.end(), out);
  return ready_order_.size();
}

// Waits for every bucket, adds the summed late gradients of the buckets stale on some rank
// (`stale[k]` != 0), and gives each parameter that had a gradient on some rank (`anywhere[i]` > 0)
// but none here its view of the sums.
void Reducer::finish(const int64_t* anywhere, const int64_t* stale) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Bucket& bucket : buckets_) groundrl_dist::await_work(group_, bucket.work, timeout_);
  add_late(stale);
  for (const Bucket& bucket : buckets_) {
    for (size_t m = 0; m < bucket.members.size(); ++m) {
      at::Tensor& param = params_[bucket.members[m]];
      if (anywhere[bucket.members[m]] > 0 && !param.grad().defined()) {
        param.mutable_grad() = slot(bucket.buffer, bucket, m);
      }
    }
  }
  reset();
}

// The diverted gradients of each bucket stale on some rank, in a flat buffer of the bucket's layout
// (zeros where none arrived), summed over the ranks and added to the bucket's sums.
void Reducer::add_late(const int64_t* stale) {
  at::NoGradGuard no_grad;
  std::vector<std::pair<at::Tensor, c10::intrusive_ptr<c10d::Work>>> sums;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    if (stale[k] == 0) continue;
    const Bucket& bucket = buckets_[k];
    at::Tensor flat = at::zeros_like(bucket.buffer);
    for (size_t m = 0; m < bucket.members.size(); ++m) {
      const at::Tensor& late = late_[bucket.members[m]];
      if (late.defined()) slot(flat, bucket, m).copy_(late);
    }
    c10d::AllreduceOptions options;
    options.timeout = timeout_;
    std::vector<at::Tensor> tensors{flat};
    sums.emplace_back(flat, group_.backend->allreduce(tensors, options));
  }
  size_t j = 0;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    if (stale[k] == 0) continue;
    groundrl_dist::await_work(group_, sums[j].second, timeout_);
    buckets_[k].buffer.add_(sums[j++].first);
  }
}

// Ready for the next gradient sum; an armed pass teaches how often each parameter it reached fires.
void Reducer::reset() {
  for (Bucket& bucket : buckets_) {
    bucket.work.reset();
    bucket.stale = false;
    bucket.waiting = bucket.members.size();
  }
  for (size_t i = 0; i < fired_.size(); ++i) {
    if (armed_pass_ && fired_[i] > 0) expected_[i] = fired_[i];
    fired_[i] = 0;
    late_[i].reset();
  }
  next_ = 0;
  armed_pass_ = false;
}

Reducer* reducer_of(void* r) { return static_cast<Reducer*>(r); }

std::vector<at::Tensor> tensors_of(at::Tensor* const* params, int64_t n) {
  std::vector<at::Tensor> tensors;
  for (int64_t i = 0; i < n; ++i) tensors.push_back(*params[i]);
  return tensors;
}

}  // namespace

extern "C" {

// Puts the hooks on each of the `n` parameters and lays them out in buckets (`set_layout`). Null on
// failure, with no hook left behind.
void* groundrl_dist_reducer_new(void* g, at::Tensor* const* params, int64_t n, const int64_t* order,
                                const int64_t* ends, int64_t buckets) {
  Reducer* reducer = nullptr;
  groundrl_dist::guarded([&] {
    auto made = std::make_unique<Reducer>(*static_cast<Group*>(g), tensors_of(params, n));
    made->set_layout(order, ends, static_cast<size_t>(buckets));
    reducer = made.release();
  });
  return reducer;
}

int groundrl_dist_reducer_set_layout(void* r, const int64_t* order, const int64_t* ends,
                                     int64_t buckets) {
  return groundrl_dist::guarded(
      [&] { reducer_of(r)->set_layout(order, ends, static_cast<size_t>(buckets)); });
}

// 1 when the hooks are on exactly these `n` tensors, in order; else 0.
int groundrl_dist_reducer_holds(void* r, at::Tensor* const* params, int64_t n) {
  return reducer_of(r)->holds(params, static_cast<size_t>(n)) ? 1 : 0;
}

int groundrl_dist_reducer_arm(void* r, int64_t timeout_ms) {
  return groundrl_dist::guarded([&] { reducer_of(r)->arm(std::chrono::milliseconds(timeout_ms)); });
}

int groundrl_dist_reducer_launch_rest(void* r, int64_t timeout_ms, int64_t* started) {
  return groundrl_dist::guarded([&] {
    *started = static_cast<int64_t>(reducer_of(r)->launch_rest(std::chrono::milliseconds(timeout_ms)));
  });
}

// Writes a flag for each parameter (it has a gradient here) and then for each bucket (it went stale).
int groundrl_dist_reducer_flags(void* r, int64_t* out) {
  return groundrl_dist::guarded([&] { reducer_of(r)->flags(out); });
}

// Writes the parameters the last armed pass reached, in order, to `out` (room for all) and their
// count to `count`.
int groundrl_dist_reducer_ready_order(void* r, int64_t* out, int64_t* count) {
  return groundrl_dist::guarded(
      [&] { *count = static_cast<int64_t>(reducer_of(r)->ready_order(out)); });
}

int groundrl_dist_reducer_finish(void* r, const int64_t* anywhere, const int64_t* stale) {
  return groundrl_dist::guarded([&] { reducer_of(r)->finish(anywhere, stale); });
}

// Removes the hooks and frees the reducer; the gradients keep their buffers.
void groundrl_dist_reducer_free(void* r) {
  groundrl_dist::guarded([&] { delete reducer_of(r); });
}

}  // extern "C"
