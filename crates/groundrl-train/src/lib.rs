//! groundrl-train: GRPO on Qwen2.5-VL.
//!
//! One readable path from prompts to a policy update: rollouts from the engine, rewards from the core
//! reward spec, group advantages, the clipped policy loss with its variants, AdamW, checkpoints that
//! resume exactly, and per-step telemetry. Formulas and the reasons for them: docs/design.md.

pub mod advantage;
pub mod checkpoint;
pub mod config;
pub mod data_parallel;
pub mod dataset;
pub mod export;
pub mod fault;
pub mod inference;
pub mod load_model;
pub mod loss;
pub mod optim;
pub mod plan;
pub mod run_folder;
pub mod scorer;
pub mod tensor_file;
pub mod trainer;
pub mod update;
