//! The optimizer: AdamW with f32 master weights, its learning-rate schedule and gradient clipping.
//!
//! - [`OptimConfig`]: the `optim` section of a training config; [`lr_at`]: the schedule.
//! - [`AdamW`]: one [`AdamW::step`] per update, with its state exported for checkpoints.
//! - [`Partition`], [`Shard`]: which rank keeps which parameters' state under ZeRO stage 1.

mod adamw;
mod config;
mod shard;

pub use adamw::{AdamW, StepOutcome};
pub use config::{OptimConfig, Schedule, lr_at};
pub use shard::{Partition, Shard};

use tch::{Kind, TchError};

use crate::checkpoint::CheckpointError;

/// Why the optimizer could not be built, stepped or restored.
#[derive(Debug, thiserror::Error)]
pub enum OptimError {
    #[error("optim.{key} must be {expected}")]
    Config {
        key: &'static str,
        expected: &'static str,
    },
    #[error("learning rate {0} is not a finite number >= 0")]
    LearningRate(f64),
    #[error("parameter `{name}` has kind {kind:?}; AdamW trains f32, bf16 and f16 parameters")]
    Kind { name: String, kind: Kind },
    #[error("parameter `{0}` is given twice")]
    Duplicate(String),
    #[error("the partition covers {tensors} tensors but the optimizer has {params} parameters")]
    Partition { tensors: usize, params: usize },
    #[error("optimizer state: {0}")]
    State(#[from] CheckpointError),
    #[error("optimizer state `{name}`: step count {value} is negative")]
    NegativeStep { name: String, value: i64 },
    #[error(transparent)]
    Torch(#[from] TchError),
}
