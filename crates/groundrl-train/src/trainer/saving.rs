//! Saving a checkpoint of the run (`crate::checkpoint` writes it): the weights, the whole optimizer
//! state and the [`super::RunState`], with where the TensorBoard event file stood.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tch::Tensor;

use super::{TrainError, Trainer};
use crate::checkpoint::{CheckpointParts, save_checkpoint};

/// An event file of the run's TensorBoard folder and its length at a checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EventsPosition {
    /// The file's name in the TensorBoard folder.
    pub file: String,
    /// Its length in bytes when the checkpoint was saved (the events of the steps up to it).
    pub len: u64,
}

impl Trainer {
    /// Writes a checkpoint of the current step. Every rank of a data-parallel run calls it: under
    /// ZeRO stage 1 the ranks first bring the optimizer state to rank 0, in an unsharded run's
    /// format, and rank 0 alone writes. Returns the checkpoint's folder on rank 0, `None` on the
    /// other ranks.
    pub fn save(&mut self) -> Result<Option<PathBuf>, TrainError> {
        let optimizer = self.whole_optimizer_state()?;
        self.saved_step = Some(self.state.step);
        let Some(logs) = &mut self.logs else {
            return Ok(None);
        };
        let file = logs.events.path().file_name().unwrap_or_default();
        self.state.events = Some(EventsPosition {
            file: file.to_string_lossy().into_owned(),
            len: logs.events.sync()?,
        });
        let weights: Vec<(String, Tensor)> = self.policy.model.var_store().variables().into_iter().collect();
        let parts = CheckpointParts {
            weights: &weights,
            optimizer: &optimizer,
            state: &self.state,
        };
        let dir = save_checkpoint(
            &self.run_dir,
            self.state.step,
            &parts,
            self.cfg.trainer.keep_checkpoints as usize,
        )?;
        Ok(Some(dir))
    }

    /// The whole optimizer state on rank 0 (nothing on the other ranks): its own, or under ZeRO
    /// stage 1 every parameter's from the rank that keeps it, one tensor at a time.
    fn whole_optimizer_state(&mut self) -> Result<Vec<(String, Tensor)>, TrainError> {
        let writes = self.writes();
        let optimizer = &self.optimizer;
        match (self.dp.as_mut(), optimizer.shard()) {
            (Some(dp), Some(shard)) => Ok(dp.gather_to_first(
                shard.partition.len(),
                |i| shard.partition.owner(i),
                |i| optimizer.entries(i),
            )?),
            _ if writes => Ok(optimizer.state()),
            _ => Ok(Vec::new()),
        }
    }
}
