//! groundrl-score: the scoring half of groundrl, with no tensor, image or file-format dependencies.
//!
//! Coordinate frames and Qwen2.5-VL's smart_resize, output parsing, rewards and metrics, plus the
//! [`data::Sample`] they read. Everything here is deterministic CPU code; `groundrl-core` re-exports
//! it for the rest of the workspace, and the Python wheel (`crates/groundrl-py`) links it alone.

pub mod data;
pub mod frame;
pub mod geometry;
pub mod metrics;
pub mod named;
pub mod parse;
pub mod resize;
pub mod reward;
