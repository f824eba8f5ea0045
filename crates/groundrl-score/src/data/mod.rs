//! The canonical [`Sample`] and the errors that name the file, record and field at fault.
//!
//! Readers, writers and importers live in `groundrl-core::data`, which re-exports these two modules:
//! scoring needs the sample's targets, not the file formats.

pub mod error;
pub mod sample;

pub use error::{DataError, FieldError, Loaded, RecordError};
pub use sample::{Content, ImageRef, Message, Sample, Shape, Target, Task};
