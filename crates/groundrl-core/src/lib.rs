//! groundrl-core: the pure-Rust half of groundrl (no libtorch).
//!
//! Data formats and importers, synthetic screenshots, prompts, tools, the curriculum, telemetry,
//! plots and the HTML report. Scoring (frames, smart_resize, parsing, rewards, metrics) lives in
//! `groundrl-score` so the Python wheel can link it alone; it is re-exported here under the same
//! paths, so `groundrl_core::reward::...` keeps working everywhere.

pub mod atomic;
pub mod curriculum;
pub mod data;
pub mod plot;
pub mod prompt;
pub mod report;
pub mod rng;
pub mod synth;
pub mod telemetry;
pub mod tool;

pub use groundrl_score::{frame, geometry, metrics, named, parse, resize, reward};
