//! groundrl-core: the pure-Rust half of groundrl (no libtorch).
//!
//! Data formats and importers, synthetic screenshots, drawing on images, prompts, tools, the
//! curriculum, telemetry, plots and the HTML report. Scoring (frames, smart_resize, parsing, rewards,
//! metrics) and the sample type live in `groundrl-score`, so the Python wheel can link them alone;
//! callers import them from there.

pub mod atomic;
pub mod curriculum;
pub mod data;
pub mod plot;
pub mod prompt;
pub mod raster;
pub mod report;
pub mod rng;
pub mod run_lock;
pub mod synth;
pub mod telemetry;
pub mod tool;
