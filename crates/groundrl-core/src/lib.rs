//! groundrl-core: the pure-Rust half of groundrl (no libtorch).
//!
//! Coordinate frames and Qwen2.5-VL's smart_resize, output parsing, rewards and metrics. Everything
//! here is deterministic CPU code, usable as a library without the tensor side.

pub mod atomic;
pub mod curriculum;
pub mod data;
pub mod frame;
pub mod geometry;
pub mod metrics;
pub mod named;
pub mod parse;
pub mod plot;
pub mod prompt;
pub mod report;
pub mod resize;
pub mod reward;
pub mod rng;
pub mod synth;
pub mod telemetry;
pub mod tool;
