//! Re-emits groundrl-tensor's link arguments (libtorch rpath; libtorch_cuda with the `cuda` feature)
//! for the `groundrl` binary: cargo passes a dependency's `rustc-link-arg` to that package only.

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_GROUNDRL_TENSOR_LINK_ARGS");
    if let Ok(args) = std::env::var("DEP_GROUNDRL_TENSOR_LINK_ARGS") {
        for arg in args.split(' ').filter(|a| !a.is_empty()) {
            println!("cargo:rustc-link-arg={arg}");
        }
    }
}
