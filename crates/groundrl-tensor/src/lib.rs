//! groundrl-tensor: the tensor side of groundrl on tch 0.24.0 / libtorch 2.11.0.
//!
//! It will hold the Qwen2.5-VL model, the rollout engine and the GRPO trainer. For now it holds the
//! device choice every one of them needs.

pub use tch;

/// The device work should run on: the first CUDA GPU when libtorch can see one, else the CPU.
///
/// CUDA is only visible in builds with the `cuda` feature (see build.rs).
pub fn default_device() -> tch::Device {
    tch::Device::cuda_if_available()
}
