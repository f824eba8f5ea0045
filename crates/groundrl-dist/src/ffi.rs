//! The C ABI of `csrc/dist.cpp`. Each call returns 0, or 1 with the C++ exception's message kept
//! for this thread (`last_error`, read right after the call).

use std::ffi::{CStr, c_char, c_int, c_void};

/// A tch tensor handle (`Tensor::as_ptr`), an `at::Tensor*` on the C++ side.
pub(crate) type RawTensor = *mut c_void;

unsafe extern "C" {
    pub(crate) fn groundrl_dist_last_error() -> *const c_char;
    pub(crate) fn groundrl_dist_gloo_new(
        host: *const c_char,
        port: u16,
        rank: c_int,
        world: c_int,
        timeout_ms: i64,
        device_host: *const c_char,
    ) -> *mut c_void;
    pub(crate) fn groundrl_dist_all_reduce_sum(g: *mut c_void, t: RawTensor, timeout_ms: i64) -> c_int;
    pub(crate) fn groundrl_dist_broadcast(
        g: *mut c_void,
        t: RawTensor,
        root: c_int,
        timeout_ms: i64,
    ) -> c_int;
    pub(crate) fn groundrl_dist_all_gather(
        g: *mut c_void,
        input: RawTensor,
        outputs: *const RawTensor,
        world: c_int,
        timeout_ms: i64,
    ) -> c_int;
    pub(crate) fn groundrl_dist_barrier(g: *mut c_void, timeout_ms: i64) -> c_int;
    pub(crate) fn groundrl_dist_free(g: *mut c_void, failed: c_int);
}

// The gradient reducer of `csrc/reducer.cpp`.
unsafe extern "C" {
    pub(crate) fn groundrl_dist_reducer_new(
        g: *mut c_void,
        params: *const RawTensor,
        n: i64,
        order: *const i64,
        ends: *const i64,
        buckets: i64,
    ) -> *mut c_void;
    pub(crate) fn groundrl_dist_reducer_set_layout(
        r: *mut c_void,
        order: *const i64,
        ends: *const i64,
        buckets: i64,
    ) -> c_int;
    pub(crate) fn groundrl_dist_reducer_holds(r: *mut c_void, params: *const RawTensor, n: i64) -> c_int;
    pub(crate) fn groundrl_dist_reducer_arm(r: *mut c_void, timeout_ms: i64) -> c_int;
    pub(crate) fn groundrl_dist_reducer_launch_rest(
        r: *mut c_void,
        timeout_ms: i64,
        started: *mut i64,
    ) -> c_int;
    pub(crate) fn groundrl_dist_reducer_flags(r: *mut c_void, out: *mut i64) -> c_int;
    pub(crate) fn groundrl_dist_reducer_ready_order(r: *mut c_void, out: *mut i64, count: *mut i64) -> c_int;
    pub(crate) fn groundrl_dist_reducer_finish(
        r: *mut c_void,
        anywhere: *const i64,
        redone: *const i64,
    ) -> c_int;
    pub(crate) fn groundrl_dist_reducer_free(r: *mut c_void);
}

#[cfg(feature = "cuda")]
unsafe extern "C" {
    pub(crate) fn groundrl_dist_nccl_new(
        host: *const c_char,
        port: u16,
        rank: c_int,
        world: c_int,
        timeout_ms: i64,
        local_rank: c_int,
        device: *mut c_int,
    ) -> *mut c_void;
    pub(crate) fn groundrl_dist_nccl_version(out: *mut c_char, capacity: c_int) -> c_int;
}

/// The message of the last failed shim call on this thread.
pub(crate) fn last_error() -> String {
    // SAFETY: the shim returns a NUL-terminated thread-local string, copied here at once.
    unsafe { CStr::from_ptr(groundrl_dist_last_error()) }
        .to_string_lossy()
        .into_owned()
}
