//! Build-script helper of the packages that depend on groundrl-tensor: cargo passes a package's
//! `rustc-link-arg` to that package's own targets only, so each dependent re-emits groundrl-tensor's
//! link arguments (libtorch rpath; libtorch_cuda with the `cuda` feature), which groundrl-tensor's
//! build script publishes as its `links` metadata (`DEP_GROUNDRL_TENSOR_LINK_ARGS`).

/// Re-emits groundrl-tensor's link arguments for the calling package's binaries and tests. Call it
/// from the build script of a package that depends on groundrl-tensor directly.
pub fn reemit_groundrl_tensor_link_args() {
    println!("cargo:rerun-if-env-changed=DEP_GROUNDRL_TENSOR_LINK_ARGS");
    if let Ok(args) = std::env::var("DEP_GROUNDRL_TENSOR_LINK_ARGS") {
        for arg in link_args(&args) {
            println!("cargo:rustc-link-arg={arg}");
        }
    }
}

/// The arguments of the space-separated `links` metadata value, empty ones left out.
fn link_args(value: &str) -> impl Iterator<Item = &str> {
    value.split(' ').filter(|a| !a.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_args_split_on_spaces_and_skip_empty_ones() {
        let args: Vec<&str> = link_args("-Wl,--disable-new-dtags  -Wl,-rpath,/opt/libtorch/lib ").collect();
        assert_eq!(args, ["-Wl,--disable-new-dtags", "-Wl,-rpath,/opt/libtorch/lib"]);
        assert_eq!(link_args("").count(), 0);
    }
}
