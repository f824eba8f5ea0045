//! The record of one training step, and its flattening into `(tag, value)` scalars.
//!
//! The JSONL log keeps the nested record; TensorBoard and console summaries want flat scalars, and
//! both get them from [`StepRecord::scalars`], so a tag means the same thing everywhere.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::stats::{Accuracy, RolloutStats, Summary};
use super::{TelemetryError, check_finite};

/// Names of the trainer's scalars, so that the trainer, the alarms and whoever reads the logs spell
/// them alike. Times are in seconds.
pub mod keys {
    pub const LOSS: &str = "loss";
    /// Mean KL to the reference policy.
    pub const KL: &str = "kl";
    /// Mean per-token entropy of the policy on its completions (read by the entropy alarm).
    pub const ENTROPY: &str = "entropy";
    /// Share of tokens whose ratio was clipped.
    pub const CLIP_FRACTION: &str = "clip_fraction";
    pub const GRAD_NORM: &str = "grad_norm";
    pub const LR: &str = "lr";
    pub const TIME_ROLLOUT: &str = "time/rollout";
    /// The parts of `time/rollout` spent encoding prompts (loading and preprocessing images) and
    /// generating; the rest is scoring.
    pub const TIME_ENCODE: &str = "time/encode";
    pub const TIME_GENERATE: &str = "time/generate";
    pub const TIME_REWARD: &str = "time/reward";
    pub const TIME_UPDATE: &str = "time/update";
    pub const TIME_STEP: &str = "time/step";
    /// Generated tokens per second during rollout.
    pub const TOKENS_PER_SECOND: &str = "tokens_per_second";
    /// Model FLOPs utilization of the update, in [0, 1], by the 6ND formula: 6 x optimizer
    /// parameters x tokens.
    pub const MFU: &str = "mfu";
    /// The same by the model FLOPs of the update's passes (attention included, each tower on the
    /// tokens or patches it runs on, the output head on the scored tokens).
    pub const MFU_MODEL_FLOPS: &str = "mfu_model_flops";
    pub const PEAK_MEMORY_BYTES: &str = "peak_memory_bytes";
    /// Steps skipped so far (non-finite loss, no group with signal).
    pub const SKIPPED_STEPS: &str = "skipped_steps";
}

/// Named training scalars the trainer fills (see [`keys`]); any name is accepted, so the trainer can
/// add one without changing this type. Values must be finite: a NaN loss is refused here, where the
/// trainer can act on it, rather than written to the log as `null`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Scalars(BTreeMap<String, f64>);

impl Scalars {
    /// Sets `name` to `value` (replacing an earlier value); refuses a non-finite value.
    pub fn insert(&mut self, name: impl Into<String>, value: f64) -> Result<(), TelemetryError> {
        let name = name.into();
        check_finite(|| format!("train.{name}"), value)?;
        self.0.insert(name, value);
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<f64> {
        self.0.get(name).copied()
    }

    /// The scalars, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, f64)> {
        self.0.iter().map(|(name, &value)| (name.as_str(), value))
    }
}

/// What one training step did: one line of the JSONL log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub step: u64,
    pub epoch: u64,
    pub rollout: RolloutStats,
    pub train: Scalars,
    /// The run-health alarms whose episode started at this step ([`super::HealthMonitor`]), in
    /// words; absent from the log when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alarms: Vec<String>,
}

impl StepRecord {
    /// The record as `(tag, value)` scalars, for TensorBoard and console summaries.
    ///
    /// Tags: `epoch`; `reward/{mean,std,min,max}`; `reward/<component>/{mean,std,min,max}`;
    /// `accuracy`; `iou/mean`; `length/{mean,max,truncated_share}`; `parse/failure_rate`; `parse/excess_boxes_share`;
    /// `frame/<name>` (share of completions); `confidence/pearson`, `confidence/count`;
    /// `groups/zero_variance_share`; `source/<name>/accuracy`; `tools/{use_rate,calls_per_sample}`,
    /// `tools/failures/<outcome>` (failed calls per completion, for each outcome that occurred) and
    /// `tools/accuracy_{with,without}`; `batch/{completions,groups}`; and `train/<name>` for each
    /// trainer scalar. A statistic that does not exist this step (accuracy
    /// with nothing judged) is left out rather than written as a number it is not.
    pub fn scalars(&self) -> Vec<(String, f64)> {
        let r = &self.rollout;
        let n = r.completions as f64;
        let mut out = vec![("epoch".to_string(), self.epoch as f64)];
        push_summary(&mut out, "reward", &r.reward);
        for (name, summary) in &r.components {
            push_summary(&mut out, &format!("reward/{name}"), summary);
        }
        push_accuracy(&mut out, "accuracy", &r.accuracy);
        if let Some(iou) = r.mean_iou {
            out.push(("iou/mean".into(), iou));
        }
        out.push(("length/mean".into(), r.length.mean));
        out.push(("length/max".into(), r.length.max as f64));
        out.push(("length/truncated_share".into(), r.length.truncated_share));
        out.push(("parse/failure_rate".into(), r.parse_failure_rate));
        out.push(("parse/excess_boxes_share".into(), r.excess_boxes_share));
        for (frame, &count) in &r.frames {
            out.push((format!("frame/{frame}"), count as f64 / n));
        }
        if let Some(pearson) = r.confidence.pearson {
            out.push(("confidence/pearson".into(), pearson));
        }
        out.push(("confidence/count".into(), r.confidence.count as f64));
        out.push(("groups/zero_variance_share".into(), r.zero_variance_group_share));
        for (source, accuracy) in &r.sources {
            push_accuracy(&mut out, &format!("source/{source}/accuracy"), accuracy);
        }
        out.push(("tools/use_rate".into(), r.tool_use_rate));
        out.push(("tools/calls_per_sample".into(), r.tool_calls_per_sample));
        for (outcome, &count) in &r.tool_call_failures {
            out.push((format!("tools/failures/{outcome}"), count as f64 / n));
        }
        push_accuracy(&mut out, "tools/accuracy_with", &r.accuracy_with_tools);
        push_accuracy(&mut out, "tools/accuracy_without", &r.accuracy_without_tools);
        out.push(("batch/completions".into(), n));
        out.push(("batch/groups".into(), r.groups as f64));
        out.extend(
            self.train
                .iter()
                .map(|(name, value)| (format!("train/{name}"), value)),
        );
        out
    }
}

fn push_summary(out: &mut Vec<(String, f64)>, prefix: &str, s: &Summary) {
    for (stat, value) in [("mean", s.mean), ("std", s.std), ("min", s.min), ("max", s.max)] {
        out.push((format!("{prefix}/{stat}"), value));
    }
}

fn push_accuracy(out: &mut Vec<(String, f64)>, tag: &str, accuracy: &Accuracy) {
    if let Some(share) = accuracy.share {
        out.push((tag.to_string(), share));
    }
}
