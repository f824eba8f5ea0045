//! Qwen3-VL (dense) on libtorch: configuration, the vision tower with its learned, interpolated position
//! grid and DeepStack features, and the Qwen3 decoder with interleaved M-RoPE; random-init shapes
//! ([`presets`]) and their FLOPs ([`flops`]).
//!
//! What the two families share comes from [`crate::qwen2_5_vl`]: the batch ([`Batch`]), positions
//! ([`crate::qwen2_5_vl::rope_index`]), checkpoint loading, RMSNorm, linear layers, the rotary tables'
//! application and attention; the model error ([`ModelError`]) is every family's.

pub mod config;
pub mod flops;
pub mod grid;
pub mod model;
pub mod presets;
pub mod text;
pub mod vision;

pub use crate::model_error::ModelError;
pub use crate::qwen2_5_vl::Batch;
pub use config::{MODEL_TYPE, Qwen3VlConfig, TextConfig, VisionConfig};
pub use model::Qwen3Vl;
pub use vision::VisionOutput;
