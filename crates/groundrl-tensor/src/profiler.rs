//! libtorch's profiler from Rust: record the operators and CUDA kernels of a piece of work and save
//! them as a Chrome trace (the file `torch.profiler` writes; open it in Perfetto or sum its kernels
//! with `scripts/bench/kernel_table.py`). Builds with the `cuda` feature compile a small C ABI shim
//! over it (`csrc/profiler.cpp`); other builds report it unavailable.

use std::path::Path;

/// Whether this build can record traces (builds with the `cuda` feature), for callers that refuse a
/// request for one before doing the work it would record.
pub const AVAILABLE: bool = cfg!(feature = "cuda");

/// Why a trace could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("the profiler needs a build with the `cuda` feature")]
    Unavailable,
    #[error("profiler {operation} failed: {message}")]
    Failed {
        operation: &'static str,
        message: String,
    },
}

/// Runs `work` under the profiler and writes the trace to `path`; returns `work`'s result.
pub fn trace<T>(path: &Path, work: impl FnOnce() -> T) -> Result<T, ProfileError> {
    ffi::start()?;
    let out = work();
    ffi::stop(path)?;
    Ok(out)
}

#[cfg(feature = "cuda")]
mod ffi {
    use std::ffi::{CString, c_char, c_int};
    use std::path::Path;

    use super::ProfileError;

    unsafe extern "C" {
        fn groundrl_profiler_start() -> c_int;
        fn groundrl_profiler_stop(path: *const c_char) -> c_int;
    }

    pub fn start() -> Result<(), ProfileError> {
        // SAFETY: no arguments; errors come back as a return code.
        check("start", unsafe { groundrl_profiler_start() })
    }

    pub fn stop(path: &Path) -> Result<(), ProfileError> {
        let path = CString::new(path.to_string_lossy().as_bytes()).map_err(|_| ProfileError::Failed {
            operation: "stop",
            message: format!("path {} holds a NUL byte", path.display()),
        })?;
        // SAFETY: a NUL-terminated path that outlives the call.
        check("stop", unsafe { groundrl_profiler_stop(path.as_ptr()) })
    }

    fn check(operation: &'static str, code: c_int) -> Result<(), ProfileError> {
        if code == 0 {
            return Ok(());
        }
        Err(ProfileError::Failed {
            operation,
            message: crate::shim::last_error(),
        })
    }
}

#[cfg(not(feature = "cuda"))]
mod ffi {
    use std::path::Path;

    use super::ProfileError;

    pub fn start() -> Result<(), ProfileError> {
        Err(ProfileError::Unavailable)
    }

    pub fn stop(_path: &Path) -> Result<(), ProfileError> {
        Err(ProfileError::Unavailable)
    }
}

#[cfg(test)]
mod tests {
    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cpu_builds_say_the_profiler_is_unavailable() {
        let err = super::trace(std::path::Path::new("unused.json"), || ()).unwrap_err();
        assert!(err.to_string().contains("`cuda` feature"), "{err}");
    }
}
