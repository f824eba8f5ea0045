//! The data layer: the canonical [`Sample`], readers and writers, importers for the field's datasets.

pub mod lint;
pub mod sample;

pub use sample::{Content, ImageRef, Message, Sample, Shape, Target, Task};
