// A C ABI over libtorch's Kineto profiler (what torch.profiler drives from Python), which tch does not
// expose: start recording CPU operators and CUDA kernels, stop and save a Chrome trace. The bench
// commands use it to show where a decoding step or a training step spends its device time.

#include <torch/csrc/autograd/profiler_kineto.h>

#include <memory>
#include <set>
#include <string>

#include "guarded.h"

namespace {

using groundrl::guarded;

namespace prof = torch::profiler::impl;

prof::ProfilerConfig config() { return prof::ProfilerConfig(prof::ProfilerState::KINETO); }

std::set<prof::ActivityType> activities() {
  return {prof::ActivityType::CPU, prof::ActivityType::CUDA};
}

}  // namespace

extern "C" {

int groundrl_profiler_start() {
  return guarded([] {
    torch::autograd::profiler::prepareProfiler(config(), activities());
    torch::autograd::profiler::enableProfiler(config(), activities());
  });
}

// Stops recording and writes the Chrome trace (JSON) to `path`.
int groundrl_profiler_stop(const char* path) {
  return guarded([&] {
    auto result = torch::autograd::profiler::disableProfiler();
    result->save(std::string(path));
  });
}

}  // extern "C"
