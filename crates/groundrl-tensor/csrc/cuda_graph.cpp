// A C ABI over libtorch's at::cuda::CUDAGraph, which tch does not expose.
//
// The rollout engine captures one decoding step (sampling + a forward of every layer) once per
// generate call and replays it, so the host issues one launch per step instead of ~2,000 kernels.
// Capture must run on a non-default stream: the graph switches the thread's current stream to a
// side stream of libtorch's pool for warm-up and capture, and back afterwards; replays run on the
// caller's current stream. Errors are C++ exceptions turned into a return code and a message.

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <string>

#include "guarded.h"

namespace {

using groundrl::guarded;

struct Graph {
  explicit Graph(c10::DeviceIndex device)
      : side(c10::cuda::getStreamFromPool(false, device)),
        previous(c10::cuda::getCurrentCUDAStream(device)) {}

  at::cuda::CUDAGraph graph;
  c10::cuda::CUDAStream side;
  c10::cuda::CUDAStream previous;
};

}  // namespace

extern "C" {

// A new, empty graph for CUDA device `device`; null on failure (see the last error).
void* groundrl_cuda_graph_new(int device) {
  Graph* g = nullptr;
  guarded([&] { g = new Graph(static_cast<c10::DeviceIndex>(device)); });
  return g;
}

// Makes the side stream current (after the device has finished the work queued so far).
int groundrl_cuda_graph_enter_side_stream(void* g) {
  return guarded([&] {
    auto* graph = static_cast<Graph*>(g);
    graph->previous = c10::cuda::getCurrentCUDAStream(graph->side.device_index());
    c10::cuda::device_synchronize();
    c10::cuda::setCurrentCUDAStream(graph->side);
  });
}

// Makes the stream current before `enter` current again, once the side stream's work is done.
int groundrl_cuda_graph_leave_side_stream(void* g) {
  return guarded([&] {
    auto* graph = static_cast<Graph*>(g);
    c10::cuda::device_synchronize();
    c10::cuda::setCurrentCUDAStream(graph->previous);
  });
}

int groundrl_cuda_graph_capture_begin(void* g) {
  return guarded([&] { static_cast<Graph*>(g)->graph.capture_begin(); });
}

int groundrl_cuda_graph_capture_end(void* g) {
  return guarded([&] { static_cast<Graph*>(g)->graph.capture_end(); });
}

int groundrl_cuda_graph_replay(void* g) {
  return guarded([&] { static_cast<Graph*>(g)->graph.replay(); });
}

void groundrl_cuda_graph_free(void* g) { delete static_cast<Graph*>(g); }

}  // extern "C"
