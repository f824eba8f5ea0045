//! The policy's updates, each ending in optimizer steps: the GRPO update of a step (`grpo.rs`) and
//! the supervised warm-up's step (`warm_up.rs`). Both train on the same rows laid out in
//! micro-batches (`batch.rs`; `shared_prefix.rs` where a group's completions share their prompt) and
//! end in the same optimizer step (`step.rs`).

mod batch;
#[cfg(test)]
pub(crate) mod fixtures;
mod grpo;
mod shared_prefix;
mod step;
mod warm_up;

use groundrl_tensor::model_error::ModelError;

use crate::data_parallel::DataParallelError;
use crate::optim::OptimError;

pub use batch::{Row, text_response};
pub use grpo::{KlPenalties, UpdateReport, UpdateSettings, kl_penalties, update};
pub use warm_up::{SftReport, SftSettings, sft_step};

/// Why [`update`] or a warm-up step ([`sft_step`]) failed: the model's computation, the
/// optimizer, or a collective of a data-parallel run (another rank died or timed out), each named as
/// what it is.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("optimizer step: {0}")]
    Optimizer(#[from] OptimError),
    #[error("data-parallel update: {0}")]
    Collective(#[from] DataParallelError),
    #[error(
        "parameter `{name}` holds NaN or infinity after an optimizer step: the run stops there, \
         unsaved, so its checkpoints keep the last good weights"
    )]
    NonFiniteWeights { name: String },
}
