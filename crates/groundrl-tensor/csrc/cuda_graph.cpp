// A C ABI over libtorch's at::cuda::CUDAGraph, which tch does not expose.
//
// The rollout engine captures runs of decoding steps (sampling + a forward of every layer) once per
// session and replays them, so the host issues one launch per run instead of hundreds of kernels a
// step. Capture must run on a non-default stream: the graph switches the thread's current stream to a
// side stream of libtorch's pool for warm-up and capture, and back afterwards; replays run on the
// caller's current stream. A capture forbids the calls that would break it (a synchronizing copy, an
// allocation) in its own thread only, so that other threads of the process may go on using the
// device meanwhile (libtorch's default forbids them in every thread and fails the capture, or the
// other thread's call, when one happens); a wait for the whole device still breaks it. Errors are C++
// exceptions turned into a return code and a message.

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

// Makes the side stream current, after the current stream has finished the work queued on it so far.
// (A wait for the whole device would break another thread's capture.)
int groundrl_cuda_graph_enter_side_stream(void* g) {
  return guarded([&] {
    auto* graph = static_cast<Graph*>(g);
    graph->previous = c10::cuda::getCurrentCUDAStream(graph->side.device_index());
    graph->previous.synchronize();
    c10::cuda::setCurrentCUDAStream(graph->side);
  });
}

// Makes the stream current before `enter` current again, once the side stream's work is done.
int groundrl_cuda_graph_leave_side_stream(void* g) {
  return guarded([&] {
    auto* graph = static_cast<Graph*>(g);
    graph->side.synchronize();
    c10::cuda::setCurrentCUDAStream(graph->previous);
  });
}

int groundrl_cuda_graph_capture_begin(void* g) {
  return guarded([&] {
    static_cast<Graph*>(g)->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
  });
}

int groundrl_cuda_graph_capture_end(void* g) {
  return guarded([&] { static_cast<Graph*>(g)->graph.capture_end(); });
}

int groundrl_cuda_graph_replay(void* g) {
  return guarded([&] { static_cast<Graph*>(g)->graph.replay(); });
}

void groundrl_cuda_graph_free(void* g) { delete static_cast<Graph*>(g); }

}  // extern "C"
