//! The data layer: the canonical [`Sample`], readers and writers, importers for the field's datasets.
//!
//! - [`sample`]: the [`Sample`] type every importer produces and every command consumes;
//! - [`jsonl`] and [`parquet`]: the two file formats (Parquet in verl's multimodal RL layout);
//! - [`import`]: ScreenSpot, ScreenSpot-Pro, OSWorld-G, COCO, ODVG and RefCOCO to samples;
//! - [`split`]: seeded, prefix-stable subsamples and splits;
//! - [`error`]: errors naming file, record and field, and [`Loaded`] (samples plus skipped records).

pub mod error;
pub mod import;
pub mod jsonl;
pub mod parquet;
pub mod sample;
pub mod split;

pub use error::{DataError, FieldError, Loaded, RecordError};
pub use sample::{Content, ImageRef, Message, Sample, Shape, Target, Task};
