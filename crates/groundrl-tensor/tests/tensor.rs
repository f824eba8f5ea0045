//! The tensor crate's integration tests (parity with transformers' goldens, rollouts, training
//! forwards, weights, processors), one file a subject, as modules of one test binary: one link of
//! libtorch and the crate instead of one a file.

mod common;
mod qwen3_vl_fixtures;

mod chat;
mod family_load;
mod image_processor;
mod libtorch_smoke;
mod lora;
mod qwen2_5_vl_parity;
mod qwen3_5_parity;
mod qwen3_5_training;
mod qwen3_vl_parity;
mod qwen3_vl_rollout;
mod qwen3_vl_training;
mod qwen3_vl_weights;
mod rollout;
mod rollout_tools;
mod safetensors_fuzz;
mod tiny_preset;
mod vision_tower;
