//! Run-health alarms: the signs that a GRPO run is going wrong, raised while it runs rather than
//! found in the curves the next morning.
//!
//! [`HealthMonitor::observe`] is fed every step's [`StepRecord`] in order and returns the alarms that
//! start at that step:
//!
//! - **length explosion**: the mean response length exceeds `length_factor` × its mean over the
//!   first `baseline_steps` steps (a policy falling into repetition loops), or the truncated share
//!   exceeds `max_truncated_share` (checked from the first step);
//! - **reward collapse**: the mean reward of the last `collapse_steps` steps falls below
//!   `collapse_fraction` × the best moving average of `window` steps seen after `warmup_steps` steps;
//!   the best is smoothed so that one lucky batch does not set a bar no later step reaches, and the
//!   recent mean over a few steps only, so that a collapse is caught within those steps while one
//!   unlucky small batch is not taken for one (at 8 prompts of a pass/fail reward near 0.35, single
//!   steps fall below half the best average by chance several times in 150 steps). Only a positive best counts: a fraction of a negative reward says
//!   nothing. Parse failures above `max_parse_failure_rate` raise their own alarm from the first
//!   step (a prompt asking for the wrong format shows there);
//! - **entropy blow-up**: the trainer's [`keys::ENTROPY`] exceeds `entropy_factor` × its mean over the
//!   first `baseline_steps` steps that report it.
//!
//! A baseline of zero raises nothing (any factor of it would be crossed by noise).
//!
//! **One alarm per episode.** An alarm fires on the first step its condition holds, stays silent
//! while the condition keeps holding, and can fire again only after a step where it did not hold.
//! Each kind of alarm has its own episodes. A resumed run starts a new monitor, whose baselines come
//! from the steps after the resume.

use std::collections::VecDeque;
use std::fmt;
use std::mem::{Discriminant, discriminant};

use serde::{Deserialize, Serialize};

use super::TelemetryError;
use super::record::{StepRecord, keys};

/// Thresholds of the health alarms (the `health` section of a training config).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthConfig {
    /// Steps whose mean length (and first entropies) make the baselines. Default 10.
    pub baseline_steps: usize,
    /// Length alarm above this multiple of the baseline length. Default 3: grounding answers are
    /// short, and a tripling is a loop, not a longer thought.
    pub length_factor: f64,
    /// Length alarm when more than this share of completions hit the token limit. Default 0.2.
    pub max_truncated_share: f64,
    /// Steps of the reward moving average. Default 10.
    pub window: usize,
    /// Steps before the moving average may set the best (early rewards move fast). Default 20.
    pub warmup_steps: usize,
    /// Collapse alarm below this fraction of the best moving average. Default 0.5.
    pub collapse_fraction: f64,
    /// Steps whose mean reward is compared with the bar (1: each step alone). Default 5.
    pub collapse_steps: usize,
    /// Parse-failure alarm above this rate. Default 0.5.
    pub max_parse_failure_rate: f64,
    /// Entropy alarm above this multiple of the baseline entropy. Default 2: GRPO's entropy normally
    /// falls, so a doubling means the policy is coming apart.
    pub entropy_factor: f64,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            baseline_steps: 10,
            length_factor: 3.0,
            max_truncated_share: 0.2,
            window: 10,
            warmup_steps: 20,
            collapse_fraction: 0.5,
            collapse_steps: 5,
            max_parse_failure_rate: 0.5,
            entropy_factor: 2.0,
        }
    }
}

impl HealthConfig {
    /// Checks every field, naming the first bad one (`health.window: ...`).
    pub fn validate(&self) -> Result<(), TelemetryError> {
        let bad =
            |field: &str, problem: &str| Err(TelemetryError::invalid(format!("health.{field}"), problem));
        if self.baseline_steps == 0 {
            return bad("baseline_steps", "must be at least 1");
        }
        if self.window == 0 {
            return bad("window", "must be at least 1");
        }
        if self.collapse_steps == 0 {
            return bad("collapse_steps", "must be at least 1");
        }
        for (field, factor) in [
            ("length_factor", self.length_factor),
            ("entropy_factor", self.entropy_factor),
        ] {
            if !(factor.is_finite() && factor > 0.0) {
                return bad(field, "must be a positive number");
            }
        }
        if !(self.collapse_fraction > 0.0 && self.collapse_fraction <= 1.0) {
            return bad("collapse_fraction", "must be in (0, 1]");
        }
        let shares = [
            ("max_truncated_share", self.max_truncated_share),
            ("max_parse_failure_rate", self.max_parse_failure_rate),
        ];
        for (field, share) in shares {
            if !(0.0..=1.0).contains(&share) {
                return bad(field, "must be in [0, 1]");
            }
        }
        Ok(())
    }
}

/// A sign of a run going wrong, with the numbers that raised it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "alarm", rename_all = "snake_case")]
pub enum Alarm {
    LengthExplosion {
        step: u64,
        mean_length: f64,
        baseline: f64,
        factor: f64,
    },
    Truncation {
        step: u64,
        share: f64,
        max: f64,
    },
    RewardCollapse {
        step: u64,
        reward: f64,
        best_average: f64,
        fraction: f64,
    },
    ParseFailures {
        step: u64,
        rate: f64,
        max: f64,
    },
    EntropyBlowUp {
        step: u64,
        entropy: f64,
        baseline: f64,
        factor: f64,
    },
}

impl fmt::Display for Alarm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Alarm::LengthExplosion {
                step,
                mean_length,
                baseline,
                factor,
            } => write!(
                f,
                "step {step}: response length explosion: mean {mean_length:.1} tokens > {factor} x baseline {baseline:.1}"
            ),
            Alarm::Truncation { step, share, max } => write!(
                f,
                "step {step}: {:.1}% of completions truncated (max {:.1}%)",
                share * 100.0,
                max * 100.0
            ),
            Alarm::RewardCollapse {
                step,
                reward,
                best_average,
                fraction,
            } => write!(
                f,
                "step {step}: reward collapse: recent mean reward {reward:.4} < {fraction} x best moving average {best_average:.4}"
            ),
            Alarm::ParseFailures { step, rate, max } => write!(
                f,
                "step {step}: {:.1}% of answers unparsable (max {:.1}%)",
                rate * 100.0,
                max * 100.0
            ),
            Alarm::EntropyBlowUp {
                step,
                entropy,
                baseline,
                factor,
            } => write!(
                f,
                "step {step}: entropy blow-up: {entropy:.4} > {factor} x baseline {baseline:.4}"
            ),
        }
    }
}

/// Watches a run step by step; see the [module docs](self) for the rules.
#[derive(Clone, Debug)]
pub struct HealthMonitor {
    config: HealthConfig,
    steps_seen: usize,
    length_baseline: Baseline,
    entropy_baseline: Baseline,
    /// The mean rewards of the last `window` steps.
    recent_rewards: VecDeque<f64>,
    best_average: Option<f64>,
    /// The kinds of alarm whose condition held at the last step: their episodes are running.
    ongoing: Vec<Discriminant<Alarm>>,
}

impl HealthMonitor {
    /// A monitor with no history; refuses an invalid config.
    pub fn new(config: HealthConfig) -> Result<Self, TelemetryError> {
        config.validate()?;
        Ok(Self {
            length_baseline: Baseline::new(config.baseline_steps),
            entropy_baseline: Baseline::new(config.baseline_steps),
            recent_rewards: VecDeque::with_capacity(config.window),
            config,
            steps_seen: 0,
            best_average: None,
            ongoing: Vec::new(),
        })
    }

    /// Takes the next step's record; returns the alarms whose episode starts at this step.
    pub fn observe(&mut self, record: &StepRecord) -> Vec<Alarm> {
        let holding = self.conditions(record);
        let starting = holding
            .iter()
            .filter(|alarm| !self.ongoing.contains(&discriminant(*alarm)))
            .cloned()
            .collect();
        self.ongoing = holding.iter().map(discriminant).collect();
        starting
    }

    /// Every alarm condition that holds at this step, updating baselines and averages.
    fn conditions(&mut self, record: &StepRecord) -> Vec<Alarm> {
        self.steps_seen += 1;
        let (c, step, r) = (self.config.clone(), record.step, &record.rollout);
        let mut alarms = Vec::new();
        let mean_length = r.length.mean;
        if let Some(baseline) = self.length_baseline.check_or_learn(mean_length)
            && mean_length > c.length_factor * baseline
        {
            alarms.push(Alarm::LengthExplosion {
                step,
                mean_length,
                baseline,
                factor: c.length_factor,
            });
        }
        if r.length.truncated_share > c.max_truncated_share {
            alarms.push(Alarm::Truncation {
                step,
                share: r.length.truncated_share,
                max: c.max_truncated_share,
            });
        }
        let best = self.best_reward_average(r.reward.mean);
        let recent = self.recent_rewards.len().min(c.collapse_steps);
        let reward = self.recent_rewards.iter().rev().take(recent).sum::<f64>() / recent as f64;
        if let Some(best_average) = best
            && reward < c.collapse_fraction * best_average
        {
            alarms.push(Alarm::RewardCollapse {
                step,
                reward,
                best_average,
                fraction: c.collapse_fraction,
            });
        }
        if r.parse_failure_rate > c.max_parse_failure_rate {
            alarms.push(Alarm::ParseFailures {
                step,
                rate: r.parse_failure_rate,
                max: c.max_parse_failure_rate,
            });
        }
        if let Some(entropy) = record.train.get(keys::ENTROPY)
            && let Some(baseline) = self.entropy_baseline.check_or_learn(entropy)
            && entropy > c.entropy_factor * baseline
        {
            alarms.push(Alarm::EntropyBlowUp {
                step,
                entropy,
                baseline,
                factor: c.entropy_factor,
            });
        }
        alarms
    }

    /// Adds this step's mean reward to the moving average and returns the best average so far, once
    /// warm-up is over and the best is positive.
    fn best_reward_average(&mut self, reward: f64) -> Option<f64> {
        if self.recent_rewards.len() == self.config.window {
            self.recent_rewards.pop_front();
        }
        self.recent_rewards.push_back(reward);
        if self.recent_rewards.len() == self.config.window && self.steps_seen > self.config.warmup_steps {
            let average = self.recent_rewards.iter().sum::<f64>() / self.config.window as f64;
            self.best_average = Some(self.best_average.map_or(average, |best| best.max(average)));
        }
        self.best_average.filter(|&best| best > 0.0)
    }
}

/// The mean of the first `steps` values of a series.
#[derive(Clone, Debug)]
struct Baseline {
    steps: usize,
    sum: f64,
    count: usize,
}

impl Baseline {
    fn new(steps: usize) -> Self {
        Self {
            steps,
            sum: 0.0,
            count: 0,
        }
    }

    /// Until the baseline is complete, takes `value` into it and returns `None`; then returns the
    /// baseline (values that make it are not checked against it). A zero baseline is `None`.
    fn check_or_learn(&mut self, value: f64) -> Option<f64> {
        if self.count < self.steps {
            self.sum += value;
            self.count += 1;
            return None;
        }
        Some(self.sum / self.count as f64).filter(|&baseline| baseline > 0.0)
    }
}
