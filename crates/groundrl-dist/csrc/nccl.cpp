// The NCCL half of the shim (built with the crate's `cuda` feature only): a ProcessGroupNCCL over the
// same TCPStore rendezvous as the Gloo group, bound to one CUDA device and connected at once; the
// collectives are dist.cpp's, through the generic c10d::Backend interface.
//
// Sources: torch/csrc/distributed/c10d/{ProcessGroupNCCL,NCCLUtils,Backend}.hpp of the torch 2.11.0
// wheel; nccl.h from third_party/nccl (the wheel ships none, README there).

#include "shim.h"

#include <torch/csrc/distributed/c10d/NCCLUtils.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <c10/cuda/CUDAFunctions.h>

#include <chrono>
#include <cstdlib>
#include <string>

// NCCLUtils.hpp turns NCCL's version into feature macros that add members to c10d's classes, so the
// header must be the one torch 2.11.0 was built against: the NCCL its wheel requires
// (nvidia-nccl-cu13==2.28.9).
static_assert(NCCL_VERSION_CODE == NCCL_VERSION(2, 28, 9),
              "third_party/nccl/include/nccl.h is not NCCL 2.28.9's");
// Both objects are allocated here but built by libtorch's constructors: their sizes must be libtorch's
// own (the `operator new(0x458)` and `operator new(0xf8)` in libtorch_cuda.so's
// ProcessGroupNCCL::merge). The options hold an ncclConfig_t, whose size changes between NCCL versions.
static_assert(sizeof(c10d::ProcessGroupNCCL) == 0x458,
              "c10d::ProcessGroupNCCL's layout differs from libtorch 2.11.0's");
static_assert(sizeof(c10d::ProcessGroupNCCL::Options) == 0xf8,
              "c10d::ProcessGroupNCCL::Options' layout differs from libtorch 2.11.0's");

extern "C" {

// Connects to (rank 0: serves) the TCPStore at host:port, then builds an NCCL group of `world` ranks
// over it on CUDA device `local_rank % visible devices` (torchrun's convention: one process per GPU,
// all GPUs visible; or each process shown its own GPU through CUDA_VISIBLE_DEVICES), written to
// `*device`. The group is bound to the device and its communicator made here, as
// torch.distributed.init_process_group(device_id=...) does, so that a rank that never comes makes
// this call fail within the timeout rather than the first collective.
//
// PyTorch's default for TORCH_NCCL_ASYNC_ERROR_HANDLING (3) makes NCCL's watchdog thread take the
// whole process down when a collective fails or times out; unless the variable is set already, it is
// set to 2 (abort the communicators, keep the process), so that the failure comes back to the caller as
// an error. c10d reads it when the group is made.
void* groundrl_dist_nccl_new(const char* host, uint16_t port, int rank, int world,
                             int64_t timeout_ms, int local_rank, int* device) {
  groundrl_dist::Group* group = nullptr;
  groundrl_dist::guarded([&] {
    std::chrono::milliseconds timeout(timeout_ms);
    const int visible = c10::cuda::device_count();
    TORCH_CHECK(visible > 0, "no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES=",
                std::getenv("CUDA_VISIBLE_DEVICES") == nullptr ? "unset"
                                                               : std::getenv("CUDA_VISIBLE_DEVICES"),
                ")");
    const at::Device cuda(at::kCUDA, static_cast<c10::DeviceIndex>(local_rank % visible));
    setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2", /*overwrite=*/0);
    auto store = groundrl_dist::connect_store(host, port, rank, world, timeout);
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    auto backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, options);
    backend->setBoundDeviceId(cuda);
    backend->eagerConnectSingleDevice(cuda);
    *device = cuda.index();
    group = new groundrl_dist::Group{store, backend, /*nccl=*/true};
  });
  return group;
}

// The version of the NCCL library loaded at run time ("2.28.9"), as c10d reports it.
int groundrl_dist_nccl_version(char* out, int capacity) {
  return groundrl_dist::guarded([&] {
    const std::string version = c10d::getNcclVersion();
    TORCH_CHECK(capacity > 0 && static_cast<int>(version.size()) < capacity,
                "NCCL version string too long: ", version);
    version.copy(out, version.size());
    out[version.size()] = '\0';
  });
}

}  // extern "C"
