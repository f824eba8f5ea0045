//! The evaluation report: overall counts, frame mix, IoU statistics, per-slice tables; as JSON (the
//! struct serializes as documented by its fields) or as aligned text tables.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use super::slices::{SliceTable, Tally, slice_tables};
use super::{ItemResult, Outcome};
use crate::data::Sample;
use crate::frame::Frame;

/// Missing ids shown in the text report; the JSON lists them all.
const MISSING_IDS_SHOWN: usize = 5;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroundingReport {
    /// Every sample: parse failures and missing predictions are wrong and stay in the denominator.
    pub overall: Tally,
    /// Parse failures by reason (the parser's, `no_click`, `out_of_frame`).
    pub parse_failure_reasons: BTreeMap<String, usize>,
    /// Samples with no prediction line, in data order.
    pub missing_ids: Vec<String>,
    /// The frame completions were expected in.
    pub model_frame: Frame,
    /// How many clicks were read in each frame: with frame detection on, a mix here is a known RL
    /// failure (a model answering some items normalized, others in pixels).
    pub answer_frames: BTreeMap<String, usize>,
    /// Clicks read in a frame other than `model_frame` (syntax hints, detection, explicit frames).
    pub answers_not_in_model_frame: usize,
    /// Over items where the model answered a box and the item has a box target.
    pub iou: IouStats,
    pub slices: Vec<SliceTable>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IouStats {
    pub n: usize,
    /// `None` when no item was answered with a box.
    pub mean: Option<f64>,
    /// Share of those items with IoU >= 0.5.
    pub share_at_least_0_5: Option<f64>,
}

impl IouStats {
    fn from_values(values: &[f64]) -> Self {
        let n = values.len();
        let share = |count: usize| (n > 0).then(|| count as f64 / n as f64);
        Self {
            n,
            mean: (n > 0).then(|| values.iter().sum::<f64>() / n as f64),
            share_at_least_0_5: share(values.iter().filter(|v| **v >= 0.5).count()),
        }
    }
}

impl GroundingReport {
    /// `items[i]` is the result for `samples[i]`.
    pub fn build(samples: &[Sample], items: &[ItemResult], model_frame: Frame) -> Self {
        let mut overall = Tally::default();
        let mut parse_failure_reasons = BTreeMap::new();
        let mut answer_frames = BTreeMap::new();
        for item in items {
            overall.add(item);
            if let Outcome::ParseFailure(reason) = &item.outcome {
                *parse_failure_reasons.entry(reason.clone()).or_insert(0) += 1;
            }
            if let Some(frame) = item.answer_frame {
                *answer_frames.entry(frame.name().to_string()).or_insert(0) += 1;
            }
        }
        let answers_not_in_model_frame = answer_frames
            .iter()
            .filter(|(f, _)| f.as_str() != model_frame.name())
            .map(|(_, n)| n)
            .sum();
        let ious: Vec<f64> = items.iter().filter_map(|i| i.iou).collect();
        Self {
            overall,
            parse_failure_reasons,
            missing_ids: items
                .iter()
                .filter(|i| i.outcome == Outcome::Missing)
                .map(|i| i.id.clone())
                .collect(),
            model_frame,
            answer_frames,
            answers_not_in_model_frame,
            iou: IouStats::from_values(&ious),
            slices: slice_tables(samples, items),
        }
    }

    /// An overall summary, then one aligned table per slice dimension.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let o = &self.overall;
        let _ = writeln!(
            out,
            "accuracy {} ({} of {} correct)",
            percent(o.accuracy),
            o.correct,
            o.n
        );
        let _ = writeln!(
            out,
            "parse failures {}{}",
            o.parse_failures,
            reasons(&self.parse_failure_reasons)
        );
        let _ = writeln!(
            out,
            "missing predictions {}{}",
            o.missing,
            self.missing_examples()
        );
        let frames: Vec<String> = self
            .answer_frames
            .iter()
            .map(|(f, n)| format!("{f} {n}"))
            .collect();
        let _ = writeln!(
            out,
            "answer frames: {}; {} not in the model frame ({})",
            if frames.is_empty() {
                "none".to_string()
            } else {
                frames.join(", ")
            },
            self.answers_not_in_model_frame,
            self.model_frame
        );
        if let (Some(mean), Some(share)) = (self.iou.mean, self.iou.share_at_least_0_5) {
            let _ = writeln!(
                out,
                "box answers {}: mean IoU {mean:.3}, IoU >= 0.5 {}",
                self.iou.n,
                percent(share)
            );
        }
        for table in &self.slices {
            out.push('\n');
            out.push_str(&table_text(table));
        }
        out
    }

    fn missing_examples(&self) -> String {
        if self.missing_ids.is_empty() {
            return String::new();
        }
        let shown: Vec<&str> = self
            .missing_ids
            .iter()
            .take(MISSING_IDS_SHOWN)
            .map(String::as_str)
            .collect();
        let more = self.missing_ids.len().saturating_sub(MISSING_IDS_SHOWN);
        let tail = if more > 0 {
            format!(", and {more} more")
        } else {
            String::new()
        };
        format!(" ({}{tail})", shown.join(", "))
    }
}

fn percent(share: f64) -> String {
    format!("{:.2}%", share * 100.0)
}

fn reasons(counts: &BTreeMap<String, usize>) -> String {
    if counts.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = counts.iter().map(|(r, n)| format!("{r} {n}")).collect();
    format!(" ({})", parts.join(", "))
}

/// `value  n  accuracy  parse failures`, the first column as wide as its longest entry.
fn table_text(table: &SliceTable) -> String {
    let width = table
        .rows
        .iter()
        .map(|r| r.value.chars().count())
        .chain([table.dimension.chars().count()])
        .max();
    let width = width.unwrap_or(0);
    let mut out = format!(
        "{:<width$}  {:>6}  {:>8}  {:>14}\n",
        table.dimension, "n", "accuracy", "parse failures"
    );
    for row in &table.rows {
        let t = &row.tally;
        let _ = writeln!(
            out,
            "{:<width$}  {:>6}  {:>8}  {:>14}",
            row.value,
            t.n,
            percent(t.accuracy),
            t.parse_failures
        );
    }
    out
}
