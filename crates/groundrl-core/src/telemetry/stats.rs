//! Statistics of one step's rollouts: what the policy produced and how it scored.
//!
//! The trainer hands one [`CompletionRecord`] per sampled completion and gets a [`RolloutStats`]
//! back. Means and standard deviations are over completions (std is the population one: the batch
//! is the whole population being described, not a sample of it); shares are over completions unless
//! their doc says otherwise. A model offered tools is summarized by how often it calls them, how the
//! calls went, and its accuracy with and without them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{TelemetryError, check_finite};
use groundrl_score::frame::Frame;

/// What the trainer knows about one sampled completion after scoring it.
///
/// `Default` is an empty record (group 0, no source, reward 0, no tool call), for tests and for
/// construction with `..Default::default()`.
/// Serializable so that the ranks of a data-parallel run can gather their records to rank 0.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionRecord {
    /// The prompt group (GRPO samples several completions per prompt).
    pub group: usize,
    /// The dataset the prompt came from (`Sample::source`).
    pub source: String,
    /// Total reward (`Scored::total`).
    pub reward: f64,
    /// Each reward component's value, in the spec's order (`Scored::components`).
    pub components: Vec<f64>,
    /// Whether the answer was right, where the task decides it.
    pub correct: Option<bool>,
    /// IoU with the target, for box answers.
    pub iou: Option<f64>,
    pub response_tokens: usize,
    /// Generation stopped at the token limit rather than at an end token.
    pub truncated: bool,
    /// The answer was parsed and placed in a frame (`ParseInfo::ok`).
    pub parse_ok: bool,
    /// The frame the answer was read in (`ParseInfo::frame`).
    pub frame: Option<Frame>,
    /// Boxes (or points) past the reward spec's `max_boxes`, not scored (`ParseInfo::excess_boxes`).
    /// 0 in logs written before it was counted.
    #[serde(default)]
    pub excess_boxes: usize,
    /// The confidence the model stated last (`Parsed::confidence`): after any tool call, the one
    /// that goes with the final answer.
    pub confidence: Option<f64>,
    /// The confidence stated before the first tool call (the one a tool-using model's gate is
    /// judged on); `None` when none was stated before it. Without a tool call, the stated one.
    pub confidence_before: Option<f64>,
    /// Tool calls the model ended a turn with, whatever became of them.
    pub tool_calls: u32,
    /// Of those, the calls the tool ran and answered (outcome `ok`).
    pub tool_calls_ok: u32,
    /// The other calls by outcome name (`malformed`, `unknown_tool`, `failed`, `turn_limit`: see
    /// `tool::CallOutcome::name`); with `tool_calls_ok` they add up to `tool_calls`.
    pub tool_call_failures: BTreeMap<String, u32>,
    /// How small the target is: see [`target_size`].
    pub target_size: Option<f64>,
}

/// The size of a sample's target as the share of the image it spans: the smaller side of the
/// target's bounding box over the smaller side of the image. With several targets (any of which is
/// a right answer) the largest is taken, the one easiest to hit. `boxes` are `[x1, y1, x2, y2]` in the
/// pixels of an image of `width` x `height`; `None` without a box or for an empty image.
pub fn target_size(boxes: &[[f64; 4]], width: f64, height: f64) -> Option<f64> {
    let image_side = width.min(height);
    if image_side.is_nan() || image_side <= 0.0 {
        return None;
    }
    boxes
        .iter()
        .map(|[x1, y1, x2, y2]| (x2 - x1).abs().min((y2 - y1).abs()) / image_side)
        .filter(|size| size.is_finite())
        .reduce(f64::max)
}

/// Mean, population standard deviation and range of a set of values.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub mean: f64,
    pub std: f64,
    pub min: f64,
    pub max: f64,
}

/// How many answers were judged, how many were right, and the share (`None` when none was judged).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    pub judged: usize,
    pub correct: usize,
    pub share: Option<f64>,
}

/// Response lengths, in tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LengthStats {
    pub mean: f64,
    pub max: usize,
    /// Share of completions cut at the token limit.
    pub truncated_share: f64,
}

/// Pearson correlation between stated confidence and correctness (1 or 0), over the `count`
/// completions that have both. `None` when it does not exist: fewer than two such completions, or
/// one side constant (every answer right, or the same confidence everywhere).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Correlation {
    pub count: usize,
    pub pearson: Option<f64>,
}

/// Everything [`RolloutStats::compute`] reports about one step's completions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RolloutStats {
    pub completions: usize,
    pub groups: usize,
    /// The total reward.
    pub reward: Summary,
    /// Each reward component, by name.
    pub components: BTreeMap<String, Summary>,
    pub accuracy: Accuracy,
    /// Mean IoU over completions that have one; `None` when none has.
    pub mean_iou: Option<f64>,
    pub length: LengthStats,
    /// Share of completions whose answer could not be parsed or placed in a frame.
    pub parse_failure_rate: f64,
    /// Share of completions that answered more boxes than the reward spec's `max_boxes` (the boxes
    /// past it are not scored): a detection policy padding its answers shows up here first.
    #[serde(default)]
    pub excess_boxes_share: f64,
    /// How many answers were read in each frame (every frame is listed, `"none"` for answers without
    /// one), so a model drifting from resized pixels to the 0-1000 grid shows up as a curve.
    pub frames: BTreeMap<String, usize>,
    /// Whether stated confidence tracks correctness.
    pub confidence: Correlation,
    /// Share of prompt groups whose rewards are all equal. Such a group has zero GRPO advantage and
    /// teaches nothing; a group of one completion counts as one.
    pub zero_variance_group_share: f64,
    /// Accuracy per dataset source.
    pub sources: BTreeMap<String, Accuracy>,
    /// Share of completions with at least one tool call that ran (`tool_calls_ok >= 1`). The tool
    /// fields read 0 / empty in logs written before tools existed.
    #[serde(default)]
    pub tool_use_rate: f64,
    /// Mean tool calls per completion, every outcome counted.
    #[serde(default)]
    pub tool_calls_per_sample: f64,
    /// Tool calls of the step, every outcome counted.
    #[serde(default)]
    pub tool_calls: u64,
    /// Calls that did not run, by outcome name (only outcomes that occurred).
    #[serde(default)]
    pub tool_call_failures: BTreeMap<String, u64>,
    /// Accuracy of the completions that used a tool (`tool_calls_ok >= 1`).
    #[serde(default)]
    pub accuracy_with_tools: Accuracy,
    /// Accuracy of the others.
    #[serde(default)]
    pub accuracy_without_tools: Accuracy,
}

impl RolloutStats {
    /// Summarizes one step's completions; `component_names` names the values of each record's
    /// `components`, in order.
    ///
    /// An empty step is an error rather than a record of nulls: a step that sampled nothing is a
    /// trainer bug to be seen, not a point to plot. Records with a non-finite number, or a component
    /// count other than the names', are refused with the record's index named.
    pub fn compute(records: &[CompletionRecord], component_names: &[String]) -> Result<Self, TelemetryError> {
        if records.is_empty() {
            return Err(TelemetryError::Empty);
        }
        check_names(component_names)?;
        for (i, record) in records.iter().enumerate() {
            check_record(i, record, component_names.len())?;
        }
        let components = component_names
            .iter()
            .enumerate()
            .map(|(c, name)| (name.clone(), summarize(records.iter().map(|r| r.components[c]))))
            .collect();
        let groups = group_rewards(records);
        Ok(Self {
            completions: records.len(),
            groups: groups.len(),
            reward: summarize(records.iter().map(|r| r.reward)),
            components,
            accuracy: accuracy(records.iter()),
            mean_iou: mean(records.iter().filter_map(|r| r.iou)),
            length: LengthStats {
                mean: mean_of(records.iter().map(|r| r.response_tokens as f64)),
                max: records.iter().map(|r| r.response_tokens).max().unwrap_or(0),
                truncated_share: share(records, |r| r.truncated),
            },
            parse_failure_rate: share(records, |r| !r.parse_ok),
            excess_boxes_share: share(records, |r| r.excess_boxes > 0),
            frames: frame_counts(records),
            confidence: confidence_correlation(records),
            zero_variance_group_share: zero_variance_share(&groups),
            sources: source_accuracy(records),
            tool_use_rate: share(records, used_tools),
            tool_calls_per_sample: mean_of(records.iter().map(|r| f64::from(r.tool_calls))),
            tool_calls: records.iter().map(|r| u64::from(r.tool_calls)).sum(),
            tool_call_failures: failure_totals(records),
            accuracy_with_tools: accuracy(records.iter().filter(|r| used_tools(r))),
            accuracy_without_tools: accuracy(records.iter().filter(|r| !used_tools(r))),
        })
    }
}

fn check_names(names: &[String]) -> Result<(), TelemetryError> {
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            return Err(TelemetryError::invalid(
                "component_names",
                format!("`{name}` is named twice"),
            ));
        }
    }
    Ok(())
}

fn check_record(i: usize, r: &CompletionRecord, components: usize) -> Result<(), TelemetryError> {
    let field = |name: &'static str| move || format!("records[{i}].{name}");
    check_finite(field("reward"), r.reward)?;
    if r.components.len() != components {
        return Err(TelemetryError::invalid(
            format!("records[{i}].components"),
            format!("{} values for {components} component names", r.components.len()),
        ));
    }
    for (c, &value) in r.components.iter().enumerate() {
        check_finite(|| format!("records[{i}].components[{c}]"), value)?;
    }
    if let Some(iou) = r.iou {
        check_finite(field("iou"), iou)?;
    }
    for (name, value) in [
        ("confidence", r.confidence),
        ("confidence_before", r.confidence_before),
        ("target_size", r.target_size),
    ] {
        if let Some(value) = value {
            check_finite(field(name), value)?;
        }
    }
    let accounted =
        u64::from(r.tool_calls_ok) + r.tool_call_failures.values().map(|&n| u64::from(n)).sum::<u64>();
    if accounted != u64::from(r.tool_calls) {
        return Err(TelemetryError::invalid(
            format!("records[{i}].tool_calls"),
            format!(
                "{} calls, but {} ok and {} failed",
                r.tool_calls,
                r.tool_calls_ok,
                accounted - u64::from(r.tool_calls_ok)
            ),
        ));
    }
    Ok(())
}

/// Whether a completion used a tool: at least one call ran.
fn used_tools(r: &CompletionRecord) -> bool {
    r.tool_calls_ok >= 1
}

fn failure_totals(records: &[CompletionRecord]) -> BTreeMap<String, u64> {
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    for (outcome, &count) in records.iter().flat_map(|r| &r.tool_call_failures) {
        if count > 0 {
            *totals.entry(outcome.clone()).or_default() += u64::from(count);
        }
    }
    totals
}

/// The summary of a non-empty set of finite values.
fn summarize(values: impl Iterator<Item = f64> + Clone) -> Summary {
    let mean = mean_of(values.clone());
    let variance = mean_of(values.clone().map(|v| (v - mean).powi(2)));
    Summary {
        mean,
        std: variance.sqrt(),
        min: values.clone().fold(f64::INFINITY, f64::min),
        max: values.fold(f64::NEG_INFINITY, f64::max),
    }
}

/// The mean, `None` for no values.
fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, count) = values.fold((0.0, 0usize), |(s, c), v| (s + v, c + 1));
    (count > 0).then(|| sum / count as f64)
}

/// The mean of values known to be there (0 for none, which callers rule out).
fn mean_of(values: impl Iterator<Item = f64>) -> f64 {
    mean(values).unwrap_or(0.0)
}

fn share(records: &[CompletionRecord], pred: impl Fn(&CompletionRecord) -> bool) -> f64 {
    records.iter().filter(|r| pred(r)).count() as f64 / records.len() as f64
}

fn accuracy<'a>(records: impl Iterator<Item = &'a CompletionRecord>) -> Accuracy {
    let (judged, correct) = records
        .filter_map(|r| r.correct)
        .fold((0, 0), |(j, c), ok| (j + 1, c + usize::from(ok)));
    Accuracy {
        judged,
        correct,
        share: (judged > 0).then(|| correct as f64 / judged as f64),
    }
}

fn source_accuracy(records: &[CompletionRecord]) -> BTreeMap<String, Accuracy> {
    let mut by_source: BTreeMap<&str, Vec<&CompletionRecord>> = BTreeMap::new();
    for r in records {
        by_source.entry(&r.source).or_default().push(r);
    }
    by_source
        .into_iter()
        .map(|(source, rs)| (source.to_string(), accuracy(rs.into_iter())))
        .collect()
}

fn frame_counts(records: &[CompletionRecord]) -> BTreeMap<String, usize> {
    let names = Frame::ALL.iter().map(|f| f.name()).chain(["none"]);
    let mut counts: BTreeMap<String, usize> = names.map(|name| (name.to_string(), 0)).collect();
    for r in records {
        let name = r.frame.map_or("none", Frame::name);
        *counts.entry(name.to_string()).or_default() += 1;
    }
    counts
}

fn confidence_correlation(records: &[CompletionRecord]) -> Correlation {
    let pairs: Vec<(f64, f64)> = records
        .iter()
        .filter_map(|r| Some((r.confidence?, f64::from(u8::from(r.correct?)))))
        .collect();
    Correlation {
        count: pairs.len(),
        pearson: pearson(&pairs),
    }
}

/// Pearson's r, `None` for fewer than two pairs or a constant side.
fn pearson(pairs: &[(f64, f64)]) -> Option<f64> {
    if pairs.len() < 2 {
        return None;
    }
    let mx = mean_of(pairs.iter().map(|p| p.0));
    let my = mean_of(pairs.iter().map(|p| p.1));
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for &(x, y) in pairs {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx).powi(2);
        syy += (y - my).powi(2);
    }
    if sxx == 0.0 || syy == 0.0 {
        return None;
    }
    // Rounding can step just past ±1.
    Some((sxy / (sxx * syy).sqrt()).clamp(-1.0, 1.0))
}

/// Each group's lowest and highest reward.
fn group_rewards(records: &[CompletionRecord]) -> BTreeMap<usize, (f64, f64)> {
    let mut groups = BTreeMap::new();
    for r in records {
        let (lo, hi) = groups.entry(r.group).or_insert((r.reward, r.reward));
        *lo = f64::min(*lo, r.reward);
        *hi = f64::max(*hi, r.reward);
    }
    groups
}

fn zero_variance_share(groups: &BTreeMap<usize, (f64, f64)>) -> f64 {
    let flat = groups.values().filter(|(lo, hi)| lo == hi).count();
    flat as f64 / groups.len() as f64
}
