//! Helpers shared by the rollout test files.

use groundrl_tensor::hf_folder::{self, HfModel, RandomFolder};
use tch::{Device, Kind};

/// The tiny preset with its layers' weights scaled up: at the preset's init scale the random model
/// greedily repeats one token whatever the context, which would leave positions and the cache untested.
pub fn tiny() -> (tempfile::TempDir, HfModel) {
    tiny_of(RandomFolder::Tiny)
}

/// [`tiny`] for another small preset (`qwen3.5-tiny`, ...).
pub fn tiny_of(which: RandomFolder) -> (tempfile::TempDir, HfModel) {
    let dir = tempfile::tempdir().unwrap();
    hf_folder::write_random(dir.path(), which, 0, Kind::Float, Device::Cpu).unwrap();
    let hf = hf_folder::load(dir.path(), Device::Cpu, Kind::Float).unwrap();
    tch::no_grad(|| {
        for (name, mut var) in hf.model.var_store().variables() {
            if !name.contains("norm") && !name.contains("embed") {
                let _ = var.g_mul_scalar_(4.0);
            }
        }
    });
    (dir, hf)
}
