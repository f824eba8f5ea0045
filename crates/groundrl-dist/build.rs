//! Compiles the c10d shim (`csrc/dist.cpp`) against the headers of the libtorch that tch links
//! (`LIBTORCH`, from `scripts/setup-libtorch.sh`) and the Gloo headers of `third_party/gloo` (the
//! torch wheel ships none), and links it with libtorch_cpu, which holds c10d and Gloo.
//!
//! The rpath to `$LIBTORCH/lib` (and the CUDA run-time folder that libtorch_cpu.so loads even on a
//! CPU machine) lets the tests run without `LD_LIBRARY_PATH`; it is an old-style DT_RPATH so that it
//! also applies to libtorch_cpu.so's own dependencies (as in groundrl-tensor's build script).

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=GROUNDRL_CUDA_RUNTIME");
    println!("cargo:rerun-if-changed=csrc/dist.cpp");
    println!("cargo:rerun-if-changed=third_party/gloo");
    let Some(libtorch) = env::var_os("LIBTORCH").map(PathBuf::from) else {
        panic!("groundrl-dist needs LIBTORCH (eval \"$(scripts/setup-libtorch.sh)\")");
    };
    let include = libtorch.join("include");
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file("csrc/dist.cpp")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .include("third_party/gloo")
        .define("USE_C10D_GLOO", None)
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .warnings(false)
        .compile("groundrl_dist");
    let lib = libtorch.join("lib");
    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-lib=dylib=c10");
    println!("cargo:rustc-link-arg=-Wl,--disable-new-dtags");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    if let Ok(dir) = env::var("GROUNDRL_CUDA_RUNTIME") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
