//! Qwen2.5-VL on libtorch.

pub mod config;
