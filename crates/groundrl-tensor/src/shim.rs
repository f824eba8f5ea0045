//! What the C++ shims (`csrc/*.cpp`, `cuda` builds) share on the Rust side: the message of a failed
//! call, which `csrc/guarded.h` keeps per thread and `csrc/guarded.cpp` exports.

use std::ffi::{CStr, c_char, c_int};
use std::fmt::Display;

use tch::TchError;

unsafe extern "C" {
    fn groundrl_last_error() -> *const c_char;
}

/// The message of the last failed shim call on this thread (read right after the call).
pub(crate) fn last_error() -> String {
    // SAFETY: the shim returns a NUL-terminated thread-local string, copied here at once.
    unsafe { CStr::from_ptr(groundrl_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// A shim call's return `code` as a result: 0 is success, anything else the error `what: message`.
pub(crate) fn checked(code: c_int, what: impl Display) -> Result<(), TchError> {
    match code {
        0 => Ok(()),
        _ => Err(TchError::Torch(format!("{what}: {}", last_error()))),
    }
}
