// What the parts of the shim share: the Gloo group and the collectives (dist.cpp, always built), the
// gradient reducer (reducer.cpp, always built) and the NCCL group (nccl.cpp, built with the crate's
// `cuda` feature only). See dist.cpp.

#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>

namespace groundrl_dist {

// This thread's message of the last failed call (dist.cpp).
std::string& last_error();

// Runs `f`: 0 when it returns, 1 when it throws (the message kept in `last_error`; c10d's errors
// without their C++ backtrace).
template <class F>
int guarded(F f) {
  try {
    f();
    return 0;
  } catch (const c10::Error& e) {
    last_error() = e.what_without_backtrace();
  } catch (const std::exception& e) {
    last_error() = e.what();
  } catch (...) {
    last_error() = "unknown C++ exception";
  }
  return 1;
}

struct Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> backend;
  // NCCL's work is waited for by polling (dist.cpp's `finish`), and the group is shut down or aborted
  // when freed.
  bool nccl = false;
};

// Waits for `work` of `group`, at most `timeout`; throws c10d's error when it failed (dist.cpp).
void await_work(const Group& group, const c10::intrusive_ptr<c10d::Work>& work,
                std::chrono::milliseconds timeout);

// Connects to (rank 0: serves) the TCPStore at host:port that the group's ranks meet at.
c10::intrusive_ptr<c10d::Store> connect_store(const char* host, uint16_t port, int rank, int world,
                                              std::chrono::milliseconds timeout);

}  // namespace groundrl_dist
