//! CUDA graphs from Rust: capture a sequence of tensor operations once, replay it with one launch.
//!
//! tch has no binding for `at::cuda::CUDAGraph`; builds with the `cuda` feature compile a small C ABI
//! shim over it (`csrc/cuda_graph.cpp`). A replay reruns the captured kernels on the same memory, so
//! everything that changes between replays must live in tensors allocated before the capture and be
//! updated in place (by the captured work itself or between replays); tensors created during the
//! capture live in the graph's private memory pool as long as the graph does. Work that needs the
//! host (reading a value, copying from host memory) cannot be captured.

use std::fmt;

use tch::Device;

/// Why a graph could not be made, captured or replayed.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    #[error("CUDA graphs need a CUDA device and a build with the `cuda` feature ({0})")]
    Unavailable(String),
    #[error("CUDA graph {operation} failed: {message}")]
    Cuda {
        operation: &'static str,
        message: String,
    },
}

/// One captured CUDA graph.
pub struct CudaGraph {
    raw: ffi::Handle,
}

impl fmt::Debug for CudaGraph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CudaGraph")
    }
}

impl CudaGraph {
    /// Runs `work` once, then captures a second call of it, both on a side stream (capture cannot use
    /// the default stream). The first call really runs: it creates the handles and workspaces that
    /// libraries make lazily on first use, which must not happen during a capture. The captured call
    /// is recorded, not run: after `capture`, `work` has run exactly once.
    pub fn capture(device: Device, mut work: impl FnMut()) -> Result<Self, GraphError> {
        let Device::Cuda(index) = device else {
            return Err(GraphError::Unavailable(format!("device is {device:?}")));
        };
        let graph = Self {
            raw: ffi::Handle::new(index)?,
        };
        graph.raw.call("enter side stream", ffi::ENTER_SIDE_STREAM)?;
        work();
        let captured = graph
            .raw
            .call("capture begin", ffi::CAPTURE_BEGIN)
            .map(|()| work())
            .and_then(|()| graph.raw.call("capture end", ffi::CAPTURE_END));
        let left = graph.raw.call("leave side stream", ffi::LEAVE_SIDE_STREAM);
        captured.and(left).map(|()| graph)
    }

    /// Launches the captured work on the current stream (asynchronously).
    pub fn replay(&self) -> Result<(), GraphError> {
        self.raw.call("replay", ffi::REPLAY)
    }
}

#[cfg(feature = "cuda")]
mod ffi {
    use std::ffi::{c_int, c_void};

    use super::GraphError;

    unsafe extern "C" {
        fn groundrl_cuda_graph_new(device: c_int) -> *mut c_void;
        fn groundrl_cuda_graph_enter_side_stream(g: *mut c_void) -> c_int;
        fn groundrl_cuda_graph_leave_side_stream(g: *mut c_void) -> c_int;
        fn groundrl_cuda_graph_capture_begin(g: *mut c_void) -> c_int;
        fn groundrl_cuda_graph_capture_end(g: *mut c_void) -> c_int;
        fn groundrl_cuda_graph_replay(g: *mut c_void) -> c_int;
        fn groundrl_cuda_graph_free(g: *mut c_void);
    }

    pub type Operation = unsafe extern "C" fn(*mut c_void) -> c_int;
    pub const ENTER_SIDE_STREAM: Operation = groundrl_cuda_graph_enter_side_stream;
    pub const LEAVE_SIDE_STREAM: Operation = groundrl_cuda_graph_leave_side_stream;
    pub const CAPTURE_BEGIN: Operation = groundrl_cuda_graph_capture_begin;
    pub const CAPTURE_END: Operation = groundrl_cuda_graph_capture_end;
    pub const REPLAY: Operation = groundrl_cuda_graph_replay;

    /// Owns the shim's graph object.
    pub struct Handle(*mut c_void);

    impl Handle {
        pub fn new(device: usize) -> Result<Self, GraphError> {
            // SAFETY: plain constructor; null on failure.
            let raw = unsafe { groundrl_cuda_graph_new(device as c_int) };
            if raw.is_null() {
                return Err(error("creation"));
            }
            Ok(Self(raw))
        }

        pub fn call(&self, operation: &'static str, f: Operation) -> Result<(), GraphError> {
            // SAFETY: self.0 is a live graph object from groundrl_cuda_graph_new.
            match unsafe { f(self.0) } {
                0 => Ok(()),
                _ => Err(error(operation)),
            }
        }
    }

    impl Drop for Handle {
        fn drop(&mut self) {
            // SAFETY: self.0 came from groundrl_cuda_graph_new and is freed once.
            unsafe { groundrl_cuda_graph_free(self.0) }
        }
    }

    fn error(operation: &'static str) -> GraphError {
        GraphError::Cuda {
            operation,
            message: crate::shim::last_error(),
        }
    }
}

#[cfg(not(feature = "cuda"))]
mod ffi {
    use super::GraphError;

    pub type Operation = ();
    pub const ENTER_SIDE_STREAM: Operation = ();
    pub const LEAVE_SIDE_STREAM: Operation = ();
    pub const CAPTURE_BEGIN: Operation = ();
    pub const CAPTURE_END: Operation = ();
    pub const REPLAY: Operation = ();

    /// Never made: this build has no CUDA graph shim.
    pub enum Handle {}

    impl Handle {
        pub fn new(_device: usize) -> Result<Self, GraphError> {
            Err(GraphError::Unavailable("built without the `cuda` feature".into()))
        }

        pub fn call(&self, _operation: &'static str, _f: Operation) -> Result<(), GraphError> {
            match *self {}
        }
    }
}
