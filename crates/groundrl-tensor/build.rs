//! Link settings for libtorch, which `torch-sys` leaves to the final artifact.
//!
//! - An rpath to `$LIBTORCH/lib` (and the CUDA run-time folder of `scripts/setup-libtorch.sh`), so test
//!   binaries run without `LD_LIBRARY_PATH`. It is an old-style DT_RPATH (`--disable-new-dtags`):
//!   libtorch_cpu.so itself needs libcudart/libcupti, and a DT_RUNPATH would not apply to it.
//! - With the `cuda` feature, `libtorch_cuda.so` is linked even though no symbol of it is referenced:
//!   libtorch registers its CUDA kernels from that library's static initializers, and the linker's
//!   default `--as-needed` would drop it, leaving CUDA "not available". Its own dependencies (cuBLAS,
//!   cuDNN, ...) are resolved at run time on the GPU machine, hence `--allow-shlib-undefined`.
//!
//! `cargo:rustc-link-arg` reaches only this package's targets; dependents read the same arguments
//! from `DEP_GROUNDRL_TENSOR_LINK_ARGS` (this package's `links` metadata) and re-emit them.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=GROUNDRL_CUDA_RUNTIME");
    let mut args = vec!["-Wl,--disable-new-dtags".to_owned()];
    for var in ["LIBTORCH", "GROUNDRL_CUDA_RUNTIME"] {
        if let Ok(dir) = env::var(var) {
            let dir = PathBuf::from(dir);
            let lib = if var == "LIBTORCH" { dir.join("lib") } else { dir };
            args.push(format!("-Wl,-rpath,{}", lib.display()));
        }
    }
    if env::var_os("CARGO_FEATURE_CUDA").is_some() {
        args.push("-Wl,--no-as-needed,-ltorch_cuda,--as-needed,--allow-shlib-undefined".to_owned());
    }
    for arg in &args {
        println!("cargo:rustc-link-arg={arg}");
    }
    println!("cargo:link_args={}", args.join(" "));
}
