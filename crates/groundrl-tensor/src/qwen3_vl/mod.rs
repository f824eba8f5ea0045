//! Qwen3-VL (dense) on libtorch: configuration, the vision tower with its learned, interpolated position
//! grid and DeepStack features, the Qwen3 decoder with interleaved M-RoPE, and what training needs of
//! them (the scored tokens' log-probs, checkpointed forwards and backwards, branched rows, LoRA,
//! saving, random-init shapes and their FLOPs), under the names Qwen2.5-VL's model gives the same
//! things; and generation's side of it (`decode.rs`: the KV-cache prefill and decoding step behind
//! [`crate::model::Decoder`]).
//!
//! What the two families share comes from [`crate::qwen2_5_vl`]: the batch ([`Batch`]) and its
//! branched layout, positions ([`crate::qwen2_5_vl::rope_index`]), checkpoint loading and writing,
//! RMSNorm, linear layers, the rotary tables' application and attention; the model error
//! ([`ModelError`]) and the LoRA adapters ([`crate::lora`]) are every family's.

mod as_model;
pub mod config;
mod decode;
pub mod flops;
pub mod grid;
pub mod lora;
pub mod model;
pub mod presets;
pub mod text;
pub mod training;
pub mod vision;

pub use crate::model_error::ModelError;
pub use crate::qwen2_5_vl::{Batch, BranchRow};
pub use config::{MODEL_TYPE, Qwen3VlConfig, TextConfig, VisionConfig};
pub use model::Qwen3Vl;
pub use vision::VisionOutput;
