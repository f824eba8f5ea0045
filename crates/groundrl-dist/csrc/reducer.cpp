// The gradient reducer: sums parameters' gradients over the ranks while the backward pass still
// runs, as PyTorch DDP's reducer does, so that communication hides behind the rest of the backward.
//
// A post-accumulate-grad hook on each parameter (torch::autograd::impl::set_post_acc_grad_hooks,
// torch/csrc/autograd/variable.h of libtorch 2.11.0; AccumulateGrad calls it after adding to the
// parameter's .grad) tells the reducer that autograd reached the parameter. The parameters are
// grouped into buckets (src/reducer.rs plans them); once every parameter of the next bucket is ready,
// its gradients are copied into one flat buffer and its all-reduce is started (c10d's
// Backend::allreduce returns a Work at once). Buckets start strictly in order, so every rank issues
// the same collectives in the same order whatever order its own backward reaches them in.
//
// The hooks act only while armed: the caller arms them for the last backward pass of a gradient
// accumulation, so earlier passes only accumulate. A parameter is ready once its hook has fired as
// often as in the last armed pass (at least once): a tied weight under gradient checkpointing is
// reached by two of the several autograd calls that make one backward pass.
//
// Exactness: the buffer is a copy, and a parameter's own gradient is left alone until `finish` copies
// the sum back. A gradient that grows after its bucket started (reached more often than the last
// armed pass reached it) marks the bucket stale; the caller then reduces that bucket again from the
// gradients as they ended, so the result never depends on when a bucket started.
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
using torch::autograd::impl::post_acc_grad_hooks;
using torch::autograd::impl::set_post_acc_grad_hooks;

struct Bucket {
  // Indices of the parameters, in the order of the flat buffer.
  std::vector<int64_t> members;
  int64_t numel = 0;
  // Members not yet ready in this pass.
  size_t waiting = 0;
  // The copy being reduced, and its collective; undefined until the bucket starts.
  at::Tensor flat;
  c10::intrusive_ptr<c10d::Work> work;
  // A member's gradient grew after the bucket started.
  bool stale = false;
};

class Reducer;

class ReadyHook final : public torch::autograd::PostAccumulateGradHook {
 public:
  ReadyHook(Reducer* reducer, size_t index) : reducer_(reducer), index_(index) {}
  void operator()(const torch::autograd::Variable& /*param*/) override;
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
  size_t launch_rest(std::chrono::milliseconds timeout);
  void stale(int64_t* out);
  size_t ready_order(int64_t* out);
  void finish(const int64_t* anywhere, const int64_t* redone);

 private:
  void launch_ready() noexcept;
  void launch(Bucket& bucket);
  void reset();

  Group group_;
  std::vector<at::Tensor> params_;
  std::vector<size_t> bucket_of_;
  std::vector<Bucket> buckets_;
  // Hook calls of each parameter in this pass, and in the last armed pass that reached it.
  std::vector<int> fired_;
  std::vector<int> expected_;
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

Reducer::Reducer(const Group& group, std::vector<at::Tensor> params)
    : group_(group), params_(std::move(params)) {
  std::unordered_set<const c10::TensorImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& param = params_[i];
    TORCH_CHECK(param.requires_grad() && param.is_leaf(), "parameter ", i,
                " is not a leaf tensor that requires a gradient");
    TORCH_CHECK(seen.insert(param.unsafeGetTensorImpl()).second, "parameter ", i,
                " is given twice");
    TORCH_CHECK(post_acc_grad_hooks(param) == nullptr, "parameter ", i,
                " already has a post-accumulate-grad hook");
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    set_post_acc_grad_hooks(params_[i], std::make_unique<ReadyHook>(this, i));
  }
  fired_.assign(params_.size(), 0);
  expected_.assign(params_.size(), 1);
}

Reducer::~Reducer() {
  for (const at::Tensor& param : params_) {
    const auto* hook = dynamic_cast<const ReadyHook*>(post_acc_grad_hooks(param).get());
    if (hook != nullptr && hook->reducer() == this) set_post_acc_grad_hooks(param, nullptr);
  }
}

// `order`: every parameter index once; bucket k holds order[ends[k - 1]..ends[k]], one dtype and
// device each (the flat buffer's).
void Reducer::set_layout(const int64_t* order, const int64_t* ends, size_t buckets) {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(!armed_ && next_ == 0, "the bucket layout changes only between gradient sums");
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

// The hook of parameter `index`: autograd has just added to its gradient.
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

// Starts the next buckets while they are ready; an error is kept for `launch_rest`.
void Reducer::launch_ready() noexcept {
  const int failed = groundrl_dist::guarded([&] {
    for (; next_ < buckets_.size() && buckets_[next_].waiting == 0; ++next_) {
      launch(buckets_[next_]);
    }
  });
  if (failed != 0) error_ = groundrl_dist::last_error();
}

// Copies the bucket's gradients into a flat buffer (zeros for a parameter without one) and starts
// its all-reduce.
void Reducer::launch(Bucket& bucket) {
  at::NoGradGuard no_grad;
  const at::Tensor& first = params_[bucket.members.front()];
  bucket.flat = at::empty({bucket.numel}, first.options());
  int64_t offset = 0;
  for (const int64_t i : bucket.members) {
    const at::Tensor& param = params_[i];
    at::Tensor slot = bucket.flat.narrow(0, offset, param.numel()).view(param.sizes());
    if (param.grad().defined()) {
      slot.copy_(param.grad());
    } else {
      slot.zero_();
    }
    offset += param.numel();
  }
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::SUM;
  options.timeout = timeout_;
  std::vector<at::Tensor> tensors{bucket.flat};
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

void Reducer::stale(int64_t* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t k = 0; k < buckets_.size(); ++k) out[k] = buckets_[k].stale ? 1 : 0;
}

// The parameters in the order the last armed pass first reached them; returns how many it reached.
size_t Reducer::ready_order(int64_t* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::copy(ready_order_.begin(), ready_order_.end(), out);
  return ready_order_.size();
}

// Waits for every bucket, then gives each parameter that had a gradient on some rank
// (`anywhere[i]` > 0) its sum; a parameter that had none here gets one. A bucket to be redone
// (`redone[k]` != 0) keeps its gradients as they are (zeros where there were none) for the caller
// to reduce again.
void Reducer::finish(const int64_t* anywhere, const int64_t* redone) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Bucket& bucket : buckets_) groundrl_dist::await_work(group_, bucket.work, timeout_);
  at::NoGradGuard no_grad;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    const Bucket& bucket = buckets_[k];
    int64_t offset = 0;
    for (const int64_t i : bucket.members) {
      at::Tensor& param = params_[i];
      const int64_t n = param.numel();
      if (anywhere[i] > 0) {
        at::Tensor& grad = param.mutable_grad();
        if (!grad.defined()) grad = at::zeros_like(param);
        if (redone[k] == 0) grad.copy_(bucket.flat.narrow(0, offset, n).view(param.sizes()));
      }
      offset += n;
    }
  }
  reset();
}

// Ready for the next gradient sum; an armed pass teaches how often each parameter it reached fires.
void Reducer::reset() {
  for (Bucket& bucket : buckets_) {
    bucket.flat.reset();
    bucket.work.reset();
    bucket.stale = false;
    bucket.waiting = bucket.members.size();
  }
  for (size_t i = 0; i < fired_.size(); ++i) {
    if (armed_pass_ && fired_[i] > 0) expected_[i] = fired_[i];
    fired_[i] = 0;
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

// Puts a hook on each of the `n` parameters and lays them out in buckets (`set_layout`). Null on
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

// Writes 1 for each bucket whose gradients grew after it started, else 0.
int groundrl_dist_reducer_stale(void* r, int64_t* out) {
  return groundrl_dist::guarded([&] { reducer_of(r)->stale(out); });
}

// Writes the parameters the last armed pass reached, in order, to `out` (room for all) and their
// count to `count`.
int groundrl_dist_reducer_ready_order(void* r, int64_t* out, int64_t* count) {
  return groundrl_dist::guarded(
      [&] { *count = static_cast<int64_t>(reducer_of(r)->ready_order(out)); });
}

int groundrl_dist_reducer_finish(void* r, const int64_t* anywhere, const int64_t* redone) {
  return groundrl_dist::guarded([&] { reducer_of(r)->finish(anywhere, redone); });
}

// Removes the hooks and frees the reducer.
void groundrl_dist_reducer_free(void* r) {
  groundrl_dist::guarded([&] { delete reducer_of(r); });
}

}  // extern "C"
