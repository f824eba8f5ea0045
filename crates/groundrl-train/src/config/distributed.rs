//! `[distributed]`: how the ranks of a data-parallel run wait for each other and check that they
//! agree (docs/distributed.md). A run of one process ignores it.

use serde::{Deserialize, Serialize};

use super::{ConfigError, TrainConfig, ensure};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DistributedConfig {
    /// Seconds the rendezvous and each collective wait for the other ranks before the run stops with
    /// an error: a rank that hung is detected after this long (one that died, at once). It must
    /// exceed the longest stretch one rank works alone (a held-out evaluation, a checkpoint's
    /// write by rank 0). Default 1800, PyTorch's default for its process groups.
    pub timeout_s: u64,
    /// Every this many steps the ranks compare checksums of their weights and stop with an error
    /// naming the ranks that differ; 0 turns the check off. Default 10.
    pub checksum_every: u32,
    /// 0: every rank keeps the whole AdamW state (the default). 1: ZeRO stage 1, each rank keeps the
    /// state (moments, f32 masters) of its share of the trained tensors, updates those alone and
    /// broadcasts them: 1/world of the optimizer's memory a rank, the same weights to the bit.
    /// Checkpoints are the same either way, so a run may resume with the other stage or world size.
    pub zero_stage: u8,
    /// Whether each bucket of gradients starts its all-reduce during the last backward pass of a
    /// mini-batch, as soon as autograd has finished its gradients (as PyTorch DDP does), rather than
    /// after the pass: the communication hides behind the rest of the backward pass. The gradients
    /// live in the buckets' buffers, so it costs no memory; the sums are those of the all-reduce
    /// after the pass (bitwise with two ranks; docs/distributed.md). Default false until it has been
    /// run and timed over NCCL on GPUs: its tests run over Gloo on the CPU.
    pub overlap_backward: bool,
}

impl Default for DistributedConfig {
    fn default() -> Self {
        Self {
            timeout_s: 1800,
            checksum_every: 10,
            zero_stage: 0,
            overlap_backward: false,
        }
    }
}

impl DistributedConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        ensure(
            self.timeout_s >= 1,
            "distributed.timeout_s",
            "must be at least 1 second, found 0",
        )?;
        ensure(
            self.zero_stage <= 1,
            "distributed.zero_stage",
            format!(
                "must be 0 (whole optimizer state on every rank) or 1 (optimizer state sharded over \
                 the ranks), found {}; stage 2 (sharded gradients) does not exist yet",
                self.zero_stage
            ),
        )
    }
}

impl TrainConfig {
    /// Checks that the run can be split over `world_size` data-parallel ranks: each rank takes an
    /// equal share of whole groups and of each mini-batch.
    pub fn validate_world_size(&self, world_size: usize) -> Result<(), ConfigError> {
        if world_size <= 1 {
            return Ok(());
        }
        let world = world_size as u64;
        let prompts = u64::from(self.rollout.prompts_per_step);
        ensure(
            prompts.is_multiple_of(world),
            "rollout.prompts_per_step",
            format!(
                "{prompts} does not divide by the world size {world_size} (each rank takes an equal share of the step's prompts)"
            ),
        )?;
        let mini = u64::from(self.trainer.mini_batch_size);
        ensure(
            mini.is_multiple_of(world),
            "trainer.mini_batch_size",
            format!(
                "{mini} does not divide by the world size {world_size} (each rank takes an equal share of a mini-batch)"
            ),
        )
    }
}
