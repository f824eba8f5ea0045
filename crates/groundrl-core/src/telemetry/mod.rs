//! Per-step training telemetry: what each GRPO step's rollouts looked like, where it is written, and
//! alarms that tell a run going wrong.
//!
//! - [`stats`]: one step's completions summarized into [`RolloutStats`] (rewards, accuracy, lengths,
//!   parse failures, frames, calibration, groups without GRPO signal);
//! - [`record`]: the [`StepRecord`] of a step (those stats plus the trainer's scalars) and its
//!   flattening into `(tag, value)` pairs for TensorBoard and console summaries;
//! - [`jsonl`]: the step log, one JSON line per step, appended across resumes;
//! - [`tensorboard`]: TensorBoard event files, written without TensorFlow;
//! - [`alarms`]: the [`HealthMonitor`], which raises an [`Alarm`] when lengths explode, rewards
//!   collapse or entropy blows up;
//! - [`eval`]: the [`EvalRecord`] of one held-out sample's answer, for the run report;
//! - [`curve`]: whether a run's reward rose and stayed up ([`check_curve`]).
//!
//! Every number written is finite: non-finite inputs are refused with the field named, and a statistic
//! that does not exist (accuracy when nothing was judged) is `None`/`null`, never NaN (serde_json writes
//! NaN as `null` without a word, which would hide the difference).

pub mod alarms;
pub mod curve;
pub mod eval;
pub mod jsonl;
pub mod record;
pub mod stats;
pub mod tensorboard;

pub use alarms::{Alarm, HealthConfig, HealthMonitor};
pub use curve::{CurveCheck, check_curve};
pub use eval::{EvalRecord, SampledAnswers, SampledSummary};
pub use jsonl::JsonlLog;
pub use record::{Scalars, StepRecord};
pub use stats::{Accuracy, CompletionRecord, Correlation, LengthStats, RolloutStats, Summary};
pub use tensorboard::EventWriter;

/// Why telemetry could not be computed or written.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A step with no completions has no statistics.
    #[error("no completions to summarize")]
    Empty,
    /// An input value or configuration field is unusable: `field: problem`.
    #[error("{field}: {problem}")]
    Invalid { field: String, problem: String },
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: {source}")]
    Json { path: String, source: serde_json::Error },
}

impl TelemetryError {
    fn invalid(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self::Invalid {
            field: field.into(),
            problem: problem.into(),
        }
    }

    fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

/// Refuses NaN and infinities, naming the field: they would reach the logs as `null` or poison every
/// mean they enter.
fn check_finite(field: impl FnOnce() -> String, value: f64) -> Result<f64, TelemetryError> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(TelemetryError::invalid(field(), format!("{value} is not finite")))
    }
}
