//! `[sft]`: an optional supervised warm-up before GRPO, on the training samples' reference answers.
//!
//! A model that never writes a parsable answer gets zero reward on every completion, so every
//! GRPO group is flat and teaches nothing (a randomly initialised model is the extreme case). A few
//! steps of cross-entropy on the answer format (`groundrl_core::prompt::answer`) give RL something
//! to sharpen; the warm-up runs in the same trainer, with its own AdamW state, before the first step.
//!
//! With `val_freq` the warm-up is also a converged supervised baseline: it answers the validation
//! samples (`data.val`) greedily every `val_freq` steps, stops after `patience` validations without
//! a better accuracy, and ends on the weights of its best validation, so that what GRPO adds is
//! measured against supervised fine-tuning run until it stopped improving, not against a warm-up cut
//! at a fixed step. At a constant rate the validation accuracy can swing by several points from one
//! check to the next, and the best check is then a lucky point of an oscillating run; with
//! `rate_drops` a plateau lowers the rate (by `rate_drop`, as PyTorch's `ReduceLROnPlateau`) and
//! the warm-up goes on, and only a plateau at the lowest rate stops it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{ConfigError, ensure};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SftConfig {
    /// Optimizer steps of warm-up; 0 turns it off. Default 0.
    pub steps: u32,
    /// The warm-up's own samples (JSONL or Parquet, as `data.train`), so that GRPO meets tasks the
    /// warm-up never showed; `""` warms up on `data.train`. Default `""`.
    pub data: PathBuf,
    /// Samples per warm-up step (in micro-batches of `trainer.micro_batch_size`). Default 16.
    pub batch_size: u32,
    /// Learning rate of the warm-up (after `warmup_steps` of linear ramp; constant unless
    /// `rate_drops` lowers it); GRPO then starts from a fresh optimizer at `optim.lr`. Default 1e-4.
    pub lr: f64,
    /// Linear learning-rate ramp at the start of the warm-up. Default 0.
    pub warmup_steps: u32,
    /// Validate every this many warm-up steps: greedy accuracy on `trainer.val_samples` of
    /// `data.val`, logged as `val_accuracy` in `sft.jsonl`; the warm-up ends on the weights of its
    /// best validation. 0: never. Default 0.
    pub val_freq: u32,
    /// Stop the warm-up after this many validations in a row without a better accuracy (early
    /// stopping; `steps` is then a cap). 0: run every step. Needs `val_freq`. Default 0.
    pub patience: u32,
    /// Plateaus (`patience` validations in a row without a better accuracy) that lower the rate
    /// and go on instead of stopping: the warm-up stops at the plateau after the last drop. Needs
    /// `patience`. Default 0.
    pub rate_drops: u32,
    /// What each drop multiplies the rate by (PyTorch's `ReduceLROnPlateau` factor). Default 0.1.
    pub rate_drop: f64,
}

impl Default for SftConfig {
    fn default() -> Self {
        Self {
            steps: 0,
            data: PathBuf::new(),
            batch_size: 16,
            lr: 1e-4,
            warmup_steps: 0,
            val_freq: 0,
            patience: 0,
            rate_drops: 0,
            rate_drop: 0.1,
        }
    }
}

impl SftConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        ensure(
            self.batch_size >= 1,
            "sft.batch_size",
            "must be at least 1, found 0",
        )?;
        ensure(
            self.lr.is_finite() && self.lr > 0.0,
            "sft.lr",
            format!("must be a positive number, found {}", self.lr),
        )?;
        ensure(
            self.patience == 0 || self.val_freq > 0,
            "sft.patience",
            "needs sft.val_freq > 0 (early stopping watches the warm-up's validations)",
        )?;
        ensure(
            self.rate_drop > 0.0 && self.rate_drop < 1.0,
            "sft.rate_drop",
            format!("must be in (0, 1), found {}", self.rate_drop),
        )?;
        ensure(
            self.rate_drops == 0 || self.patience > 0,
            "sft.rate_drops",
            "needs sft.patience > 0 (a drop comes where the warm-up would stop)",
        )
    }

    /// Whether the warm-up validates after step `step` (1-based).
    pub fn validates_after(&self, step: u32) -> bool {
        self.val_freq > 0 && step.is_multiple_of(self.val_freq)
    }

    /// The learning rate of warm-up step `step` (0-based) after `drops` of `rate_drops`.
    pub fn lr_at(&self, step: u32, drops: u32) -> f64 {
        let lr = self.lr * self.rate_drop.powi(drops as i32);
        if step < self.warmup_steps {
            lr * f64::from(step + 1) / f64::from(self.warmup_steps)
        } else {
            lr
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_ramps_then_falls_by_the_drop_after_each_plateau() {
        let sft = SftConfig {
            lr: 1e-3,
            warmup_steps: 4,
            rate_drop: 0.5,
            ..SftConfig::default()
        };
        assert_eq!(sft.lr_at(0, 0), 2.5e-4);
        assert_eq!(sft.lr_at(10, 0), 1e-3);
        assert_eq!(sft.lr_at(10, 3), 1.25e-4);
        assert_eq!(sft.lr_at(1, 1), 2.5e-4);
    }

    #[test]
    fn a_drop_outside_zero_to_one_or_without_patience_is_refused() {
        let with = |rate_drop, rate_drops, patience| SftConfig {
            rate_drop,
            rate_drops,
            patience,
            val_freq: 5,
            ..SftConfig::default()
        };
        assert!(with(0.1, 2, 3).validate().is_ok());
        assert!(with(0.1, 0, 0).validate().is_ok());
        for (drop, drops, patience, key) in [
            (0.0, 2, 3, "sft.rate_drop"),
            (1.0, 2, 3, "sft.rate_drop"),
            (f64::NAN, 2, 3, "sft.rate_drop"),
            (0.1, 2, 0, "sft.rate_drops"),
        ] {
            let e = with(drop, drops, patience).validate().unwrap_err().to_string();
            assert!(e.contains(key), "{drop}, {drops}, {patience}: {e}");
        }
    }
}
