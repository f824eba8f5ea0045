// A C ABI over libtorch's c10d (the layer under PyTorch's torch.distributed): a TCPStore for the
// rendezvous and a ProcessGroupGloo (here) or ProcessGroupNCCL (nccl.cpp, with the crate's `cuda`
// feature) for the collectives, used through the generic c10d::Backend interface. Each collective
// waits at most its timeout (c10d's Work::wait throws past it) and passes the same timeout in its
// options, which stops Gloo's own transfer too and sets the deadline of NCCL's watchdog.
// Every entry point catches C++ exceptions and returns a code; the message is kept per
// thread for the Rust side (src/ffi.rs), so no exception crosses the FFI boundary.
//
// Sources: torch/csrc/distributed/c10d/{TCPStore,ProcessGroupGloo,Backend,Work,Types}.hpp of the
// torch 2.11.0 wheel; Gloo's headers from third_party/gloo (the wheel ships none, README there).

#include "shim.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

// The object is allocated here but built by libtorch's constructor: its size must be libtorch's own
// (the `operator new(0x1e8)` in libtorch_cpu.so's ProcessGroupGloo::split).
static_assert(sizeof(c10d::ProcessGroupGloo) == 0x1e8,
              "c10d::ProcessGroupGloo's layout differs from libtorch 2.11.0's");

namespace groundrl_dist {

std::string& last_error() {
  thread_local std::string message;
  return message;
}

c10::intrusive_ptr<c10d::Store> connect_store(const char* host, uint16_t port, int rank, int world,
                                              std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions store_options;
  store_options.port = port;
  store_options.isServer = rank == 0;
  store_options.numWorkers = static_cast<std::size_t>(world);
  store_options.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(host, store_options);
}

// Waits for a collective's work, at most `timeout` from this call. ProcessGroupNCCL's own
// wait(timeout) checks its work once a millisecond (a 1 ms nanosleep between checks in libtorch_cuda.so
// 2.11.0), which would dominate collectives that take microseconds; for NCCL the work is polled here
// (yielding at first, then sleeping 100 us), and wait() is called once it is done or the timeout has
// passed: it returns at once for finished work or throws its error, and for work older than the
// timeout it aborts the communicators and throws c10d's timeout error.
void await_work(const Group& group, const c10::intrusive_ptr<c10d::Work>& work,
                std::chrono::milliseconds timeout) {
  if (group.nccl) {
    const auto start = std::chrono::steady_clock::now();
    for (int polls = 0; !work->isCompleted(); ++polls) {
      if (std::chrono::steady_clock::now() - start >= timeout) break;
      if (polls < 10000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
  }
  work->wait(timeout);
}

}  // namespace groundrl_dist

using groundrl_dist::await_work;
using groundrl_dist::Group;
using groundrl_dist::guarded;

extern "C" {

const char* groundrl_dist_last_error() { return groundrl_dist::last_error().c_str(); }

// Connects to (rank 0: serves) the TCPStore at host:port, then builds a Gloo group of `world`
// ranks over it. `device_host`: the address this rank's Gloo transport binds to, or null for c10d's
// default device (this host's name, or GLOO_SOCKET_IFNAME's interfaces). Null on failure.
void* groundrl_dist_gloo_new(const char* host, uint16_t port, int rank, int world,
                             int64_t timeout_ms, const char* device_host) {
  Group* group = nullptr;
  guarded([&] {
    std::chrono::milliseconds timeout(timeout_ms);
    auto store = groundrl_dist::connect_store(host, port, rank, world, timeout);
    auto options = device_host == nullptr
                       ? c10d::ProcessGroupGloo::Options::create_default(timeout)
                       : c10d::ProcessGroupGloo::Options::create(timeout);
    if (device_host != nullptr) {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(device_host));
    }
    auto backend = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, options);
    group = new Group{store, backend};
  });
  return group;
}

int groundrl_dist_all_reduce_sum(void* g, at::Tensor* tensor, int64_t timeout_ms) {
  return guarded([&] {
    std::vector<at::Tensor> tensors{*tensor};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    opts.timeout = std::chrono::milliseconds(timeout_ms);
    auto* group = static_cast<Group*>(g);
    await_work(*group, group->backend->allreduce(tensors, opts), opts.timeout);
  });
}

int groundrl_dist_broadcast(void* g, at::Tensor* tensor, int root, int64_t timeout_ms) {
  return guarded([&] {
    std::vector<at::Tensor> tensors{*tensor};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = std::chrono::milliseconds(timeout_ms);
    auto* group = static_cast<Group*>(g);
    await_work(*group, group->backend->broadcast(tensors, opts), opts.timeout);
  });
}

// Gathers every rank's `input` into `outputs[0..world]` (tensors of the input's shape and dtype).
int groundrl_dist_all_gather(void* g, const at::Tensor* input, at::Tensor* const* outputs,
                             int world, int64_t timeout_ms) {
  return guarded([&] {
    std::vector<at::Tensor> inputs{*input};
    std::vector<std::vector<at::Tensor>> gathered(1);
    for (int r = 0; r < world; ++r) gathered[0].push_back(*outputs[r]);
    c10d::AllgatherOptions opts;
    opts.timeout = std::chrono::milliseconds(timeout_ms);
    auto* group = static_cast<Group*>(g);
    await_work(*group, group->backend->allgather(gathered, inputs, opts), opts.timeout);
  });
}

int groundrl_dist_barrier(void* g, int64_t timeout_ms) {
  return guarded([&] {
    c10d::BarrierOptions opts;
    opts.timeout = std::chrono::milliseconds(timeout_ms);
    auto* group = static_cast<Group*>(g);
    await_work(*group, group->backend->barrier(opts), opts.timeout);
  });
}

// The backend goes first: its worker threads stop before the store closes. An NCCL group is shut
// down (its communicators destroyed) as PyTorch's destroy_process_group does, or aborted when a
// collective failed (`failed` != 0), whose communicators may be stuck in a kernel.
void groundrl_dist_free(void* g, int failed) {
  auto* group = static_cast<Group*>(g);
  guarded([&] {
    if (group->nccl) {
      if (failed != 0) {
        group->backend->abort();
      } else {
        group->backend->shutdown();
      }
    }
  });
  guarded([&] {
    group->backend.reset();
    delete group;
  });
}

}  // extern "C"
