//! The `optim` section of a training config and the learning-rate schedule it describes.

use serde::{Deserialize, Serialize};

use super::OptimError;

/// How the learning rate moves after warmup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    /// `lr` for every step after warmup.
    #[default]
    Constant,
    /// Half a cosine from `lr` down to `min_lr_ratio × lr`, reached at `total_steps`.
    Cosine,
}

/// AdamW, its learning-rate schedule and gradient clipping.
///
/// Every field has a default, so a config file names only what it changes; unknown keys are rejected
/// (a misspelt `weight_decay` must not silently train with the default).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OptimConfig {
    /// Peak learning rate, reached at the end of warmup.
    pub lr: f64,
    /// Decay rate of the first moment (the running mean of gradients).
    pub beta1: f64,
    /// Decay rate of the second moment (the running mean of squared gradients).
    pub beta2: f64,
    /// Added to the root of the second moment so that a near-zero gradient does not divide by zero.
    pub eps: f64,
    /// Decoupled weight decay: each step multiplies parameters by `1 − lr × weight_decay`.
    pub weight_decay: f64,
    /// Steps of linear warmup from 0 to `lr` (0: start at `lr`).
    pub warmup_steps: u64,
    /// The schedule after warmup.
    pub schedule: Schedule,
    /// Where the cosine ends, as a share of `lr` (0: decays to zero).
    pub min_lr_ratio: f64,
    /// Largest global L2 norm of all trainable gradients; larger gradients are scaled down to it
    /// (0: no clipping).
    pub grad_clip: f64,
    /// Keep f32 master copies of bf16/f16 parameters: updates are accumulated in f32 and rounded into the
    /// parameters, so steps smaller than half a bf16 spacing are not lost. No effect on f32 parameters.
    pub fp32_master: bool,
}

impl Default for OptimConfig {
    fn default() -> Self {
        Self {
            lr: 1e-6,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            warmup_steps: 0,
            schedule: Schedule::Constant,
            min_lr_ratio: 0.0,
            grad_clip: 1.0,
            fp32_master: true,
        }
    }
}

impl OptimConfig {
    /// Checks the ranges in which AdamW is defined; the error names the key (`optim.beta1`, ...).
    pub fn validate(&self) -> Result<(), OptimError> {
        const AT_LEAST_0: &str = "a finite number >= 0";
        let at_least_0 = |x: f64| x >= 0.0 && x.is_finite();
        let positive = |x: f64| x > 0.0 && x.is_finite();
        let below_1 = |x: f64| (0.0..1.0).contains(&x);
        let share = |x: f64| (0.0..=1.0).contains(&x);
        let checks = [
            ("lr", at_least_0(self.lr), AT_LEAST_0),
            ("beta1", below_1(self.beta1), "in [0, 1)"),
            ("beta2", below_1(self.beta2), "in [0, 1)"),
            ("eps", positive(self.eps), "a finite number > 0"),
            ("weight_decay", at_least_0(self.weight_decay), AT_LEAST_0),
            ("min_lr_ratio", share(self.min_lr_ratio), "in [0, 1]"),
            ("grad_clip", at_least_0(self.grad_clip), AT_LEAST_0),
        ];
        match checks.into_iter().find(|(_, ok, _)| !ok) {
            Some((key, _, expected)) => Err(OptimError::Config { key, expected }),
            None => Ok(()),
        }
    }
}

/// The learning rate of optimizer step `step` (0-based) in a run of `total_steps` steps.
///
/// Warmup: step `s < warmup_steps` gets `lr × (s + 1) / warmup_steps`, so the first step already
/// moves (HF's `s / warmup` spends step 0 at lr 0) and the last warmup step reaches `lr`.
/// After warmup, [`Schedule::Constant`] keeps `lr`; [`Schedule::Cosine`] follows
/// `lr × (r + (1 − r) × ½(1 + cos(π p)))` with `r = min_lr_ratio` and progress
/// `p = (step − warmup_steps) / (total_steps − warmup_steps)`, clamped to [0, 1]: `lr` right after
/// warmup, `r × lr` at `total_steps` and beyond.
pub fn lr_at(step: u64, total_steps: u64, cfg: &OptimConfig) -> f64 {
    if step < cfg.warmup_steps {
        return cfg.lr * (step + 1) as f64 / cfg.warmup_steps as f64;
    }
    match cfg.schedule {
        Schedule::Constant => cfg.lr,
        Schedule::Cosine => {
            let decay_steps = total_steps.saturating_sub(cfg.warmup_steps).max(1);
            let progress = ((step - cfg.warmup_steps) as f64 / decay_steps as f64).min(1.0);
            let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
            cfg.lr * (cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * cosine)
        }
    }
}
