//! groundrl-tensor: the tensor side of groundrl on tch 0.24.0 / libtorch 2.11.0.
//!
//! - [`qwen2_5_vl`]: the Qwen2.5-VL model (vision tower, M-RoPE decoder), loaded from and saved to HF folders.
//! - [`qwen3_5`]: Qwen3.5's gated delta rule (the family is not loadable yet).
//! - [`qwen3_vl`]: the Qwen3-VL (dense) model (DeepStack vision tower, interleaved M-RoPE Qwen3 decoder),
//!   loaded from HF folders; [`family`] tells the two apart by a folder's `config.json`.
//! - [`model`]: what a model family provides to generation (and training), as traits the engine
//!   holds without naming a family.
//! - [`model_error`], [`lora`], [`attention`], [`packed_attention`], [`special_ids`], [`upload`]:
//!   what every model family shares: the model error, LoRA adapters, segment attention, causal
//!   attention within packed sequences, the special token ids a tokenizer and a model agree on, host
//!   values uploaded without stopping the host.
//! - [`processor`]: what turns a chat with images into model inputs exactly as HF's processor does
//!   (image preprocessing, tokenizer, chat template).
//! - [`rollout`]: batched generation with a KV cache, seeded sampling and the sampled tokens' log-probs.
//! - [`fused`]: CUDA kernels for what libtorch runs in several passes (rotary embeddings, SwiGLU).
//! - [`cuda_graph`]: capture and replay of CUDA graphs (a shim over libtorch's `CUDAGraph`).
//! - [`profiler`]: Chrome traces of operators and kernels (a shim over libtorch's profiler).

pub mod attention;
pub mod bench;
pub(crate) mod checkpoint;
pub mod cuda_graph;
pub(crate) mod decoder;
pub mod family;
pub mod foreach;
pub mod fused;
pub mod hf_folder;
pub(crate) mod layers;
pub mod lora;
pub mod model;
pub mod model_error;
pub mod packed_attention;
pub mod processor;
pub mod profiler;
pub mod qwen2_5_vl;
pub mod qwen3_5;
pub mod qwen3_vl;
pub mod rollout;
pub mod scores;
#[cfg(feature = "cuda")]
mod shim;
pub mod special_ids;
pub(crate) mod tied_head;
pub mod upload;

pub use tch;

/// The device work should run on: the first CUDA GPU when libtorch can see one, else the CPU.
///
/// CUDA is only visible in builds with the `cuda` feature (see build.rs).
pub fn default_device() -> tch::Device {
    tch::Device::cuda_if_available()
}
