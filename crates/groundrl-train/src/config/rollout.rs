//! `[rollout]`: how many completions are sampled per step and how.

use serde::{Deserialize, Serialize};

use super::{ConfigError, ensure};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RolloutConfig {
    /// Completions sampled per prompt: the group whose rewards GRPO compares. Default 8.
    pub n: u32,
    /// Prompts per training step; a step trains on `prompts_per_step * n` completions. Default 8.
    pub prompts_per_step: u32,
    /// Sampling temperature, above 0: greedy decoding would make a prompt's n completions identical
    /// (validation decodes greedily on its own). Default 1.0.
    pub temperature: f64,
    /// Nucleus sampling: keep the most likely tokens up to this probability mass; 1 keeps all.
    /// Default 1.0.
    pub top_p: f64,
    /// Keep only the `top_k` most likely tokens; 0 keeps all. Default 0.
    pub top_k: u32,
    /// Most tokens a completion may have; longer ones are cut (finish reason `length`). Default 128.
    pub max_new_tokens: u32,
    /// DAPO's dynamic sampling: drop groups whose completions all got the same reward (they carry no
    /// signal) and sample more prompts until `prompts_per_step` informative groups are found.
    /// Default false.
    pub dynamic_sampling: bool,
    /// With dynamic sampling, the most prompts one step may sample while refilling; the step trains
    /// on what it has when the cap is reached. Default 32.
    pub max_prompts_per_step: u32,
    /// Keep the rollout engine from one step to the next: its fused weights refreshed in place after
    /// each optimizer step, and per call shape its KV cache and captured CUDA graph, so that a step's
    /// generation does not fuse weights, allocate a cache or capture a graph again. They stay in
    /// device memory through the update (`groundrl plan` counts them there); false frees them after
    /// every generation, for a run whose update needs that memory. Completions are the same either
    /// way. Default true.
    pub keep_engine: bool,
}

impl Default for RolloutConfig {
    fn default() -> Self {
        Self {
            n: 8,
            prompts_per_step: 8,
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            max_new_tokens: 128,
            dynamic_sampling: false,
            max_prompts_per_step: 32,
            keep_engine: true,
        }
    }
}

impl RolloutConfig {
    /// Completions of one step: `prompts_per_step * n`.
    pub fn completions_per_step(&self) -> u64 {
        u64::from(self.prompts_per_step) * u64::from(self.n)
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        ensure(self.n >= 1, "rollout.n", "must be at least 1, found 0")?;
        ensure(
            self.prompts_per_step >= 1,
            "rollout.prompts_per_step",
            "must be at least 1, found 0",
        )?;
        ensure(
            self.temperature.is_finite() && self.temperature > 0.0,
            "rollout.temperature",
            format!(
                "must be above 0 (greedy completions of a prompt would all be equal), found {}",
                self.temperature
            ),
        )?;
        ensure(
            self.top_p > 0.0 && self.top_p <= 1.0,
            "rollout.top_p",
            format!("must be in (0, 1], found {}", self.top_p),
        )?;
        ensure(
            self.max_new_tokens >= 1,
            "rollout.max_new_tokens",
            "must be at least 1, found 0",
        )?;
        if self.dynamic_sampling {
            ensure(
                self.max_prompts_per_step >= self.prompts_per_step,
                "rollout.max_prompts_per_step",
                format!(
                    "{} is below rollout.prompts_per_step {}",
                    self.max_prompts_per_step, self.prompts_per_step
                ),
            )?;
        }
        Ok(())
    }
}
