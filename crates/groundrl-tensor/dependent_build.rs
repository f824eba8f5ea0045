// Included by the build scripts of the packages that depend on groundrl-tensor (`include!`): cargo
// passes a package's `rustc-link-arg` to that package's own targets only, so each dependent re-emits
// groundrl-tensor's link arguments (libtorch rpath; libtorch_cuda with the `cuda` feature), which
// groundrl-tensor's build script publishes as its `links` metadata.

/// Re-emits groundrl-tensor's link arguments for this package's binaries and tests.
fn reemit_groundrl_tensor_link_args() {
    println!("cargo:rerun-if-env-changed=DEP_GROUNDRL_TENSOR_LINK_ARGS");
    if let Ok(args) = std::env::var("DEP_GROUNDRL_TENSOR_LINK_ARGS") {
        for arg in args.split(' ').filter(|a| !a.is_empty()) {
            println!("cargo:rustc-link-arg={arg}");
        }
    }
}
