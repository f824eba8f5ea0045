//! The error of loading, saving and running a model, shared by every model family and by the
//! model-neutral modules beside them (attention, the rollout engine, benchmarks).

use std::fmt::Display;
use std::path::Path;

use crate::lora::LoraError;

/// What can go wrong loading, saving or running the model; each names the file, tensor or input at fault.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: {problem}")]
    File { path: String, problem: String },
    #[error("{place}: missing {what}")]
    Missing { what: String, place: String },
    #[error("{place}: tensor `{name}` has shape {found:?}, the config expects {expected:?}")]
    Shape {
        name: String,
        expected: Vec<i64>,
        found: Vec<i64>,
        place: String,
    },
    #[error("{place}: {} tensor(s) not used by the model: {}", names.len(), names.iter().take(5).cloned().collect::<Vec<_>>().join(", "))]
    Unexpected { names: Vec<String>, place: String },
    #[error("bad model input: {0}")]
    Input(String),
    #[error(transparent)]
    Lora(#[from] LoraError),
    #[error(transparent)]
    Torch(#[from] tch::TchError),
}

impl ModelError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.display().to_string(),
            source,
        }
    }

    pub(crate) fn file(path: &Path, problem: impl Display) -> Self {
        Self::File {
            path: path.display().to_string(),
            problem: problem.to_string(),
        }
    }
}
