// What the C ABI shims share: C++ exceptions turned into a return code and a message that the
// Rust side reads right after a failed call (one slot per thread, for every shim; exported once as
// `groundrl_last_error`, guarded.cpp).

#pragma once

#include <exception>
#include <string>

namespace groundrl {

inline thread_local std::string last_error;

// Runs `f`: 0 when it returns, 1 when it throws (the message kept in `last_error`).
template <class F>
int guarded(F f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "unknown C++ exception";
  }
  return 1;
}

}  // namespace groundrl
