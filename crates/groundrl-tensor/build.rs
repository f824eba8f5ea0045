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
//! - With the `cuda` feature, the C++ shims (`csrc/cuda_graph.cpp`, a C ABI over
//!   `at::cuda::CUDAGraph`; `csrc/profiler.cpp`, over libtorch's Kineto profiler; `csrc/fused.cpp`,
//!   over the kernels; `csrc/autograd.cpp`, kernels as autograd functions; `csrc/flash_varlen.cpp`,
//!   over libtorch's varlen flash attention; `csrc/foreach.cpp`, over its multi-tensor operations)
//!   are compiled against
//!   libtorch's headers and the CUDA headers of `scripts/gpu/cuda-toolkit.sh`
//!   (`GROUNDRL_CUDA_INCLUDE`), and linked with libtorch_cuda/libc10_cuda; the CUDA kernels
//!   (`csrc/*.cu`) are compiled by that script's nvcc (`NVCC`) for sm_80 and sm_90 (PTX for later
//!   GPUs) and linked with the shared CUDA runtime, the one libtorch loads.
//!
//! `cargo:rustc-link-arg` reaches only this package's targets; dependents read the same arguments
//! from `DEP_GROUNDRL_TENSOR_LINK_ARGS` (this package's `links` metadata) and re-emit them
//! (`groundrl_build::reemit_groundrl_tensor_link_args`).

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=GROUNDRL_CUDA_RUNTIME");
    println!("cargo:rerun-if-env-changed=GROUNDRL_CUDA_INCLUDE");
    println!("cargo:rerun-if-changed=csrc/cuda_graph.cpp");
    println!("cargo:rerun-if-changed=csrc/profiler.cpp");
    println!("cargo:rerun-if-changed=csrc/guarded.h");
    println!("cargo:rerun-if-changed=csrc/guarded.cpp");
    println!("cargo:rerun-if-changed=csrc/fused.cpp");
    println!("cargo:rerun-if-changed=csrc/autograd.cpp");
    println!("cargo:rerun-if-changed=csrc/flash_varlen.cpp");
    println!("cargo:rerun-if-changed=csrc/foreach.cpp");
    println!("cargo:rerun-if-changed=csrc/tensor_args.h");
    println!("cargo:rerun-if-changed=csrc/kernels.cu");
    println!("cargo:rerun-if-changed=csrc/gate_up_swiglu.cu");
    println!("cargo:rerun-if-changed=csrc/prompt_attention.cu");
    println!("cargo:rerun-if-changed=csrc/split_product.cu");
    println!("cargo:rerun-if-changed=csrc/hopper.cuh");
    println!("cargo:rerun-if-changed=csrc/dependent_launch.cuh");
    println!("cargo:rerun-if-changed=csrc/hopper_launch.h");
    println!("cargo:rerun-if-changed=csrc/decode_attention.cu");
    println!("cargo:rerun-if-changed=csrc/sampling.cu");
    println!("cargo:rerun-if-changed=csrc/adamw.cu");
    println!("cargo:rerun-if-changed=csrc/gated_delta.cu");
    println!("cargo:rerun-if-env-changed=NVCC");
    let mut args = vec!["-Wl,--disable-new-dtags".to_owned()];
    for var in ["LIBTORCH", "GROUNDRL_CUDA_RUNTIME"] {
        if let Ok(dir) = env::var(var) {
            let dir = PathBuf::from(dir);
            let lib = if var == "LIBTORCH" { dir.join("lib") } else { dir };
            args.push(format!("-Wl,-rpath,{}", lib.display()));
        }
    }
    if cfg!(feature = "cuda") {
        args.push("-Wl,--no-as-needed,-ltorch_cuda,--as-needed,--allow-shlib-undefined".to_owned());
    }
    #[cfg(feature = "cuda")]
    compile_cuda_shims();
    #[cfg(feature = "cuda")]
    compile_cuda_kernels(&mut args);
    for arg in &args {
        println!("cargo:rustc-link-arg={arg}");
    }
    println!("cargo:link_args={}", args.join(" "));
}

/// Compiles the C++ shims into a static library linked into this crate.
#[cfg(feature = "cuda")]
fn compile_cuda_shims() {
    let libtorch = PathBuf::from(env::var("LIBTORCH").expect(
        "the cuda feature needs LIBTORCH (eval \"$(scripts/setup-libtorch.sh)\"; see scripts/gpu/build.sh)",
    ));
    let cuda_include = env::var("GROUNDRL_CUDA_INCLUDE").expect(
        "the cuda feature needs GROUNDRL_CUDA_INCLUDE (eval \"$(scripts/gpu/cuda-toolkit.sh)\"; see scripts/gpu/build.sh)",
    );
    let include = libtorch.join("include");
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file("csrc/cuda_graph.cpp")
        .file("csrc/profiler.cpp")
        .file("csrc/fused.cpp")
        .file("csrc/autograd.cpp")
        .file("csrc/flash_varlen.cpp")
        .file("csrc/foreach.cpp")
        .file("csrc/guarded.cpp")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .include(cuda_include)
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .warnings(false)
        .compile("groundrl_cuda_graph");
    println!(
        "cargo:rustc-link-search=native={}",
        libtorch.join("lib").display()
    );
    println!("cargo:rustc-link-lib=dylib=torch_cuda");
    println!("cargo:rustc-link-lib=dylib=c10_cuda");
    println!("cargo:rustc-link-lib=dylib=c10");
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
}

/// Compiles the CUDA kernels (`csrc/*.cu`) with nvcc (the `NVCC` of `scripts/gpu/cuda-toolkit.sh`)
/// into a static library, linked with the shared CUDA runtime (`GROUNDRL_CUDA_RUNTIME` here, torch's
/// on the GPU machine). No fast math: the kernels of kernels.cu and adamw.cu round as the PyTorch
/// operations they replace.
/// Built for the GPUs the kernels were measured on (sm_90) and A100s (sm_80), with sm_90 PTX for later
/// ones; `gate_up_swiglu.cu`, `prompt_attention.cu` and `split_product.cu` (with `hopper.cuh`) for sm_90a
/// alone.
#[cfg(feature = "cuda")]
fn compile_cuda_kernels(args: &mut Vec<String>) {
    if env::var_os("NVCC").is_none() {
        panic!(
            "the cuda feature needs NVCC (eval \"$(scripts/gpu/cuda-toolkit.sh)\"; see scripts/gpu/build.sh)"
        );
    }
    cc::Build::new()
        .cuda(true)
        .cudart("none")
        .file("csrc/kernels.cu")
        .file("csrc/decode_attention.cu")
        .file("csrc/sampling.cu")
        .file("csrc/adamw.cu")
        .file("csrc/gated_delta.cu")
        // The release profile keeps debug info, for which cc would pass nvcc `-G` (device code
        // unoptimized: measured 2x slower decoding steps).
        .debug(false)
        .flag("-O3")
        .flag("-gencode=arch=compute_80,code=sm_80")
        .flag("-gencode=arch=compute_90,code=[sm_90,compute_90]")
        .warnings(false)
        .compile("groundrl_cuda_kernels");
    // The Hopper kernels (`wgmma`, which only the sm_90a target has): their launchers decline other
    // GPUs. One library each: cc compiles a build of several files as relocatable device code, in
    // which ptxas serializes the warp-group products (it warns of "Extern calls").
    for (file, lib) in [
        ("csrc/gate_up_swiglu.cu", "groundrl_cuda_gate_up"),
        ("csrc/prompt_attention.cu", "groundrl_cuda_prompt_attention"),
        ("csrc/split_product.cu", "groundrl_cuda_split_product"),
    ] {
        cc::Build::new()
            .cuda(true)
            .cudart("none")
            .file(file)
            .debug(false)
            .flag("-O3")
            .flag("-gencode=arch=compute_90a,code=sm_90a")
            .warnings(false)
            .compile(lib);
    }
    if let Ok(dir) = env::var("GROUNDRL_CUDA_RUNTIME") {
        args.push(format!("-L{dir}"));
    }
    args.push("-l:libcudart.so.13".to_owned());
}
