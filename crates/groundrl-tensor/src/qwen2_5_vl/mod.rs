//! Qwen2.5-VL on libtorch: configuration, checkpoint tensors, the vision tower and the M-RoPE decoder,
//! and the arithmetic of their forwards ([`flops`]).

mod as_model;
pub mod branches;
pub mod config;
mod decode;
pub mod flops;
pub(crate) use crate::layers;
pub mod lora;
pub mod model;
pub mod presets;
pub mod rope_index;
pub mod text;
pub mod training;
pub mod vision;
pub mod weights;

pub use branches::BranchRow;
pub use config::{Qwen25VlConfig, TextConfig, VisionConfig};
pub use model::{Batch, Qwen25Vl};
