//! Compiles the c10d shim (`csrc/dist.cpp` and the gradient reducer `csrc/reducer.cpp`) against the
//! headers of the libtorch that tch links (`LIBTORCH`, from `scripts/setup-libtorch.sh`) and the Gloo
//! headers of `third_party/gloo` (the torch wheel ships none), and links it with libtorch_cpu, which
//! holds c10d, Gloo and autograd.
//!
//! With the `cuda` feature, the NCCL half (`csrc/nccl.cpp`) is compiled too, against the same
//! headers plus NCCL's (`third_party/nccl`, the version torch 2.11.0 requires) and the CUDA headers
//! that `ProcessGroupNCCL.hpp` reaches through ATen's CUDA context (`GROUNDRL_CUDA_INCLUDE` and
//! `GROUNDRL_CUDA_MATH_INCLUDE`, from `scripts/gpu/cuda-toolkit.sh`), and linked with libtorch_cuda
//! and libc10_cuda, which hold `ProcessGroupNCCL` and the CUDA device calls. libtorch_cuda.so's own
//! dependencies (libnccl, cuBLAS, cuDNN, ...) are not on this machine; they are resolved at run time on
//! the GPU machine, hence `--allow-shlib-undefined` (as in groundrl-tensor's build script).
//!
//! The rpath to `$LIBTORCH/lib` (and the CUDA run-time folder that libtorch_cpu.so loads even on a
//! CPU machine) lets the tests run without `LD_LIBRARY_PATH`; it is an old-style DT_RPATH so that it
//! also applies to libtorch_cpu.so's own dependencies (as in groundrl-tensor's build script).

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=GROUNDRL_CUDA_RUNTIME");
    println!("cargo:rerun-if-env-changed=GROUNDRL_CUDA_INCLUDE");
    println!("cargo:rerun-if-env-changed=GROUNDRL_CUDA_MATH_INCLUDE");
    println!("cargo:rerun-if-changed=csrc/dist.cpp");
    println!("cargo:rerun-if-changed=csrc/nccl.cpp");
    println!("cargo:rerun-if-changed=csrc/reducer.cpp");
    println!("cargo:rerun-if-changed=csrc/shim.h");
    println!("cargo:rerun-if-changed=third_party/gloo");
    println!("cargo:rerun-if-changed=third_party/nccl");
    let Some(libtorch) = env::var_os("LIBTORCH").map(PathBuf::from) else {
        panic!("groundrl-dist needs LIBTORCH (eval \"$(scripts/setup-libtorch.sh)\")");
    };
    let include = libtorch.join("include");
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .file("csrc/dist.cpp")
        .file("csrc/reducer.cpp")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .include("third_party/gloo")
        .define("USE_C10D_GLOO", None)
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .warnings(false);
    let cuda = env::var_os("CARGO_FEATURE_CUDA").is_some();
    if cuda {
        let var = |name: &str| {
            env::var(name).unwrap_or_else(|_| {
                panic!(
                    "the cuda feature needs {name} (eval \"$(scripts/gpu/cuda-toolkit.sh)\"; see scripts/gpu/build.sh)"
                )
            })
        };
        build
            .file("csrc/nccl.cpp")
            .include("third_party/nccl/include")
            .include(var("GROUNDRL_CUDA_INCLUDE"))
            .include(var("GROUNDRL_CUDA_MATH_INCLUDE"))
            .define("USE_C10D_NCCL", None);
    }
    build.compile("groundrl_dist");
    let lib = libtorch.join("lib");
    println!("cargo:rustc-link-search=native={}", lib.display());
    if cuda {
        println!("cargo:rustc-link-lib=dylib=torch_cuda");
        println!("cargo:rustc-link-lib=dylib=c10_cuda");
        println!("cargo:rustc-link-arg=-Wl,--allow-shlib-undefined");
    }
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-lib=dylib=c10");
    println!("cargo:rustc-link-arg=-Wl,--disable-new-dtags");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    if let Ok(dir) = env::var("GROUNDRL_CUDA_RUNTIME") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
