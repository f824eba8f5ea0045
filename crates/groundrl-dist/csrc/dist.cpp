// A C ABI over libtorch's c10d (the layer under PyTorch's torch.distributed): a TCPStore for the
// rendezvous and a ProcessGroupGloo for the collectives, used through the generic c10d::Backend
// interface. Each collective waits at most its timeout (c10d's Work::wait throws "Operation timed
// out!" past it) and passes the same timeout in its options, which stops Gloo's own transfer too.
// Every entry point catches C++ exceptions and returns a code; the message is kept per
// thread for the Rust side (src/ffi.rs), so no exception crosses the FFI boundary.
//
// Sources: torch/csrc/distributed/c10d/{TCPStore,ProcessGroupGloo,Backend,Work,Types}.hpp of the
// torch 2.11.0 wheel; Gloo's headers from third_party/gloo (the wheel ships none, README there).

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <exception>
#include <string>
#include <vector>

// The object is allocated here but built by libtorch's constructor: its size must be libtorch's own
// (the `operator new(0x1e8)` in libtorch_cpu.so's ProcessGroupGloo::split).
static_assert(sizeof(c10d::ProcessGroupGloo) == 0x1e8,
              "c10d::ProcessGroupGloo's layout differs from libtorch 2.11.0's");

namespace {

thread_local std::string last_error;

// Runs `f`: 0 when it returns, 1 when it throws (the message kept in `last_error`; c10d's errors
// without their C++ backtrace).
template <class F>
int guarded(F f) {
  try {
    f();
    return 0;
  } catch (const c10::Error& e) {
    last_error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "unknown C++ exception";
  }
  return 1;
}

struct Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> backend;
};

}  // namespace

extern "C" {

const char* groundrl_dist_last_error() { return last_error.c_str(); }

// Connects to (rank 0: serves) the TCPStore at host:port, then builds a Gloo group of `world`
// ranks over it. `device_host`: the address this rank's Gloo transport binds to, or null for c10d's
// default device (this host's name, or GLOO_SOCKET_IFNAME's interfaces). Null on failure.
void* groundrl_dist_gloo_new(const char* host, uint16_t port, int rank, int world,
                             int64_t timeout_ms, const char* device_host) {
  Group* group = nullptr;
  guarded([&] {
    std::chrono::milliseconds timeout(timeout_ms);
    c10d::TCPStoreOptions store_options;
    store_options.port = port;
    store_options.isServer = rank == 0;
    store_options.numWorkers = static_cast<std::size_t>(world);
    store_options.timeout = timeout;
    auto store = c10::make_intrusive<c10d::TCPStore>(host, store_options);
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
    static_cast<Group*>(g)->backend->allreduce(tensors, opts)->wait(opts.timeout);
  });
}

int groundrl_dist_broadcast(void* g, at::Tensor* tensor, int root, int64_t timeout_ms) {
  return guarded([&] {
    std::vector<at::Tensor> tensors{*tensor};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = std::chrono::milliseconds(timeout_ms);
    static_cast<Group*>(g)->backend->broadcast(tensors, opts)->wait(opts.timeout);
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
    static_cast<Group*>(g)->backend->allgather(gathered, inputs, opts)->wait(opts.timeout);
  });
}

int groundrl_dist_barrier(void* g, int64_t timeout_ms) {
  return guarded([&] {
    c10d::BarrierOptions opts;
    opts.timeout = std::chrono::milliseconds(timeout_ms);
    static_cast<Group*>(g)->backend->barrier(opts)->wait(opts.timeout);
  });
}

// The backend goes first: its worker threads stop before the store closes.
void groundrl_dist_free(void* g) {
  guarded([&] {
    auto* group = static_cast<Group*>(g);
    group->backend.reset();
    delete group;
  });
}

}  // extern "C"
