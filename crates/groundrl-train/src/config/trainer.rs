//! `[trainer]`: the run's folder, its length, how a step's completions are batched for the update,
//! validation, checkpoints, early stopping and the guard against non-finite steps.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{ConfigError, ensure};

/// The validation metrics early stopping can watch (greedy decoding on the fixed subsample).
pub const EARLY_STOPPING_METRICS: [&str; 2] = ["val/accuracy", "val/reward"];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainerConfig {
    /// Folder of the run: resolved config, logs, checkpoints. Default `runs/grpo`.
    pub run_dir: PathBuf,
    /// Passes over the training samples. Default 1.
    pub total_epochs: u32,
    /// Stop after this many steps even if epochs remain; 0 for no cap. Default 0.
    pub max_steps: u64,
    /// Optimisation passes over one step's completions (PPO epochs); above 1 the clipped ratio
    /// starts to matter. Default 1.
    pub ppo_epochs: u32,
    /// Completions per optimizer step; must divide `rollout.prompts_per_step * rollout.n`, which is
    /// then `(prompts_per_step * n) / mini_batch_size` optimizer steps per training step. Default 64.
    pub mini_batch_size: u32,
    /// Completions per forward/backward; gradients of `mini_batch_size / micro_batch_size` of them
    /// are accumulated. Bounds the activation memory. Default 4.
    pub micro_batch_size: u32,
    /// Completion tokens projected to the vocabulary at once when computing log-probs; bounds the
    /// transient logits (`logprob_chunk * vocab` floats). Default 1024.
    pub logprob_chunk: u32,
    /// Validate every this many steps; 0 never. Default 10.
    pub test_freq: u32,
    /// Answer every held-out set (`data.test`, `data.held_out`) every this many warm-up steps and
    /// GRPO steps, besides before and after GRPO: the curves of held-out accuracy against steps
    /// (`eval/sft-step-NNNNNN.jsonl`, `eval/grpo-step-NNNNNN.jsonl`). 0: before and after only.
    /// Default 0.
    pub held_out_freq: u32,
    /// Save a checkpoint every this many steps and after the last; 0: never (measurement runs,
    /// where a 3B checkpoint with its optimizer state would be ~50 GB). Default 50.
    pub save_freq: u32,
    /// Checkpoints kept on disk (the oldest are removed); 0 keeps all. Default 2.
    pub keep_checkpoints: u32,
    /// Validation samples, a fixed seeded subsample of `data.val` decoded greedily; 0 for all of
    /// them. Default 256.
    pub val_samples: u32,
    /// Validation metric watched by early stopping: `val/accuracy` or `val/reward`; `""` when off.
    /// Default `""`.
    pub early_stopping_metric: String,
    /// Stop after this many validations without improvement of the metric; 0 turns early stopping
    /// off. Default 0.
    pub early_stopping_patience: u32,
    /// Whether the metric improves upwards (`max`) or downwards (`min`). Default `max`.
    pub early_stopping_mode: EarlyStoppingMode,
    /// Stop the run after this many steps in a row were skipped for a non-finite loss or gradient.
    /// Default 3.
    pub max_nonfinite_steps: u32,
    /// Seed of sampling and of the validation subsample. Default 0.
    pub seed: u64,
    /// Completions sampled per held-out test sample at the training temperature, besides the
    /// greedy answer, at each held-out evaluation: pass@k (k = this) tells how much accuracy
    /// sampling reaches that greedy decoding does not, the headroom GRPO can turn into greedy
    /// accuracy. 0: greedy only. Default 0.
    pub eval_samples: u32,
    /// Forward each group's prompt once in the update, its completions as branches attending to it
    /// (`update/shared_prefix.rs`): the same gradient up to float summation order, a prompt's tokens
    /// and image run once instead of `rollout.n` times. Applies where no response holds an image
    /// (tool turns' zoomed views take the row-per-completion layout); step records say whether it
    /// ran (`update/shared_prefix`). Default true.
    pub shared_prefix: bool,
    /// Record this step (1-based, as the step records count) with libtorch's profiler: Chrome traces
    /// of its rollout phase and of its update phase, `profile/step-N-rollout.json` and
    /// `profile/step-N-update.json` in the run folder (rank 0's alone in a data-parallel run), to sum
    /// by kernel with `scripts/bench/kernel_table.py`. The step's times in its record include the
    /// profiler's cost and the traces' writing, so pick a step after the first (whose rollout
    /// captures the decoding graphs) and leave it out of timings. Needs a build with the `cuda`
    /// feature: other builds refuse the run when it starts or resumes. 0: off. Default 0.
    pub profile_step: u64,
}

impl Default for TrainerConfig {
    fn default() -> Self {
        Self {
            run_dir: PathBuf::from("runs/grpo"),
            total_epochs: 1,
            max_steps: 0,
            ppo_epochs: 1,
            mini_batch_size: 64,
            micro_batch_size: 4,
            logprob_chunk: 1024,
            test_freq: 10,
            held_out_freq: 0,
            save_freq: 50,
            keep_checkpoints: 2,
            val_samples: 256,
            early_stopping_metric: String::new(),
            early_stopping_patience: 0,
            early_stopping_mode: EarlyStoppingMode::Max,
            max_nonfinite_steps: 3,
            seed: 0,
            eval_samples: 0,
            shared_prefix: true,
            profile_step: 0,
        }
    }
}

/// Direction in which the early-stopping metric improves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EarlyStoppingMode {
    Max,
    Min,
}

impl TrainerConfig {
    /// Refuses `profile_step` where the profiler is not `available` (a build without the `cuda`
    /// feature): checked when a run starts or resumes, so that it stops before its first step rather
    /// than at the profiled one. Not part of [`Self::validate`], so that `groundrl plan` takes a GPU
    /// run's config on any build.
    pub fn check_profiler(&self, available: bool) -> Result<(), ConfigError> {
        ensure(
            self.profile_step == 0 || available,
            "trainer.profile_step",
            "the profiler needs a build with the `cuda` feature; set 0 (off) on this one",
        )
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        ensure(
            !self.run_dir.as_os_str().is_empty(),
            "trainer.run_dir",
            "is required",
        )?;
        let at_least_one = [
            ("trainer.total_epochs", self.total_epochs),
            ("trainer.ppo_epochs", self.ppo_epochs),
            ("trainer.mini_batch_size", self.mini_batch_size),
            ("trainer.micro_batch_size", self.micro_batch_size),
            ("trainer.logprob_chunk", self.logprob_chunk),
            ("trainer.max_nonfinite_steps", self.max_nonfinite_steps),
        ];
        for (key, value) in at_least_one {
            ensure(value >= 1, key, "must be at least 1, found 0")?;
        }
        ensure(
            self.mini_batch_size.is_multiple_of(self.micro_batch_size),
            "trainer.micro_batch_size",
            format!(
                "{} does not divide trainer.mini_batch_size {}",
                self.micro_batch_size, self.mini_batch_size
            ),
        )?;
        if self.early_stopping_patience > 0 {
            ensure(
                !self.early_stopping_metric.is_empty(),
                "trainer.early_stopping_metric",
                "is required when trainer.early_stopping_patience > 0",
            )?;
            ensure(
                self.test_freq > 0,
                "trainer.test_freq",
                "must be positive for early stopping (it watches validation metrics)",
            )?;
            ensure(
                EARLY_STOPPING_METRICS.contains(&self.early_stopping_metric.as_str()),
                "trainer.early_stopping_metric",
                format!(
                    "`{}` is not one of {}",
                    self.early_stopping_metric,
                    EARLY_STOPPING_METRICS.join(", ")
                ),
            )?;
        }
        Ok(())
    }
}
