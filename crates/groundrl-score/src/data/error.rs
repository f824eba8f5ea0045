//! Errors of the data layer, each naming the file, the record and the field at fault.
//!
//! A long conversion does not stop at the first bad record: readers return the good samples in a
//! [`Loaded`] together with one [`RecordError`] per skipped record, and the caller reports them (or
//! turns them into a failure with [`Loaded::strict`]). Nothing is dropped silently.

use std::fmt;
use std::path::Path;

use super::Sample;

/// What is wrong with one field of a record, before we know which file and record it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the field in the record, e.g. `bbox` or `targets[0].shape`.
    pub field: String,
    pub problem: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, problem: impl fmt::Display) -> Self {
        Self {
            field: field.into(),
            problem: problem.to_string(),
        }
    }

    /// Places the error in a file and record (`line 3`, `record 5`, `image 139`).
    pub fn at(self, file: &Path, record: impl Into<String>) -> RecordError {
        RecordError {
            file: file.display().to_string(),
            record: record.into(),
            field: self.field,
            problem: self.problem,
        }
    }
}

/// One bad record: `file: record: field: problem`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {record}: {field}: {problem}")]
pub struct RecordError {
    pub file: String,
    pub record: String,
    pub field: String,
    pub problem: String,
}

/// Why a whole file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    /// The file is not in the expected format at all (not JSON, a missing top-level key, a parquet
    /// schema without the needed columns).
    #[error("{path}: {message}")]
    Format { path: String, message: String },
    #[error(transparent)]
    Record(#[from] RecordError),
}

impl DataError {
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        DataError::Io {
            path: path.display().to_string(),
            source,
        }
    }

    pub fn format(path: &Path, message: impl fmt::Display) -> Self {
        DataError::Format {
            path: path.display().to_string(),
            message: message.to_string(),
        }
    }
}

/// The samples read from a file and the records that had to be skipped.
#[derive(Debug, Default, PartialEq)]
pub struct Loaded {
    pub samples: Vec<Sample>,
    pub skipped: Vec<RecordError>,
}

impl Loaded {
    /// Strict mode: the samples if every record was good, else the first bad record as the error.
    pub fn strict(self) -> Result<Vec<Sample>, DataError> {
        match self.skipped.into_iter().next() {
            Some(first) => Err(first.into()),
            None => Ok(self.samples),
        }
    }

    /// Files the outcome of converting one record.
    pub fn push(&mut self, outcome: Result<Sample, RecordError>) {
        match outcome {
            Ok(sample) => self.samples.push(sample),
            Err(err) => self.skipped.push(err),
        }
    }
}

/// Decodes a JSON value into `T`, naming the offending field (`targets[0].shape`) on failure.
pub fn from_json_value<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(value).map_err(|e| field_error_from_path(&e))
}

/// Decodes one line of JSON text into `T`, naming the offending field on failure.
pub fn from_json_str<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, FieldError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| field_error_from_path(&e))
}

fn field_error_from_path<E: fmt::Display>(e: &serde_path_to_error::Error<E>) -> FieldError {
    // `.` is the record itself; `?` a place the parser could not name (e.g. broken JSON syntax).
    let path = e.path().to_string();
    let field = if path == "." || path == "?" {
        "record".to_string()
    } else {
        path
    };
    FieldError::new(field, e.inner())
}
