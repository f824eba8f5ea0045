//! Per-slice accuracy: the breakdowns each benchmark's own script reports, plus target size.
//!
//! Dimensions, each shown only when some sample has it:
//! - `source` (the importer's `screenspot/<split>`, `screenspot-pro/<group>`, `osworld-g`, ...);
//! - ScreenSpot: `data_type` (text | icon) and `source x data_type` (split x text/icon);
//! - ScreenSpot-Pro: `application`, `group`, `ui_type`, `platform`;
//! - OSWorld-G: `GUI_types` (a list: an item counts in each of its types) and `box_type`;
//! - `target size`: the first target's area as a share of the image area, in buckets
//!   `< 0.1%`, `0.1-1%`, `1-5%`, `>= 5%` (lower bound inclusive), and `refusal` for refusal items.
//!   A 3840x2160 ScreenSpot-Pro screenshot's 0.1% is 8294 px², about a 91 px square: most of its
//!   icons fall in the first bucket, which is where models fail.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{ItemResult, Outcome};
use crate::data::Sample;

/// Counts over a set of items.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Tally {
    pub n: usize,
    pub correct: usize,
    /// `correct / n`, in [0, 1].
    pub accuracy: f64,
    pub parse_failures: usize,
    pub missing: usize,
}

impl Tally {
    pub fn add(&mut self, item: &ItemResult) {
        self.n += 1;
        self.correct += usize::from(item.correct);
        self.parse_failures += usize::from(matches!(item.outcome, Outcome::ParseFailure(_)));
        self.missing += usize::from(item.outcome == Outcome::Missing);
        self.accuracy = self.correct as f64 / self.n as f64;
    }
}

/// Accuracy per value of one dimension.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SliceTable {
    pub dimension: String,
    pub rows: Vec<SliceRow>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SliceRow {
    pub value: String,
    #[serde(flatten)]
    pub tally: Tally,
}

/// Upper bounds (exclusive) of the size buckets, as shares of the image area, with their labels;
/// the last bucket has no upper bound.
const SIZE_BUCKETS: [(f64, &str); 4] = [
    (0.001, "< 0.1%"),
    (0.01, "0.1-1%"),
    (0.05, "1-5%"),
    (f64::INFINITY, ">= 5%"),
];

/// The bucket of a target area share: its rank (for ordering) and label.
pub fn size_bucket(share: Option<f64>) -> (usize, &'static str) {
    match share {
        None => (SIZE_BUCKETS.len(), "refusal"),
        Some(share) => {
            let rank = SIZE_BUCKETS
                .iter()
                .position(|(upper, _)| share < *upper)
                .unwrap_or(SIZE_BUCKETS.len() - 1);
            (rank, SIZE_BUCKETS[rank].1)
        }
    }
}

/// The values of one dimension for one item, each with a rank that orders rows before the value
/// itself (only size buckets use it).
type Values = fn(&Sample, &ItemResult) -> Vec<(usize, String)>;

const DIMENSIONS: [(&str, Values); 10] = [
    ("source", |s, _| vec![(0, s.source.clone())]),
    ("data_type", |s, _| metadata(s, "data_type")),
    ("source x data_type", |s, _| {
        metadata(s, "data_type")
            .into_iter()
            .map(|(r, t)| (r, format!("{} {t}", s.source)))
            .collect()
    }),
    ("platform", |s, _| metadata(s, "platform")),
    ("application", |s, _| metadata(s, "application")),
    ("group", |s, _| metadata(s, "group")),
    ("ui_type", |s, _| metadata(s, "ui_type")),
    ("GUI_types", |s, _| metadata(s, "GUI_types")),
    ("box_type", |s, _| metadata(s, "box_type")),
    ("target size", |_, item| {
        let (rank, label) = size_bucket(item.target_area);
        vec![(rank, label.to_string())]
    }),
];

/// A metadata field's values: a string, each element of a list, or any other value as JSON text.
fn metadata(sample: &Sample, key: &str) -> Vec<(usize, String)> {
    use serde_json::Value;
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match sample.metadata.get(key) {
        None | Some(Value::Null) => vec![],
        Some(Value::Array(values)) => values.iter().map(|v| (0, text(v))).collect(),
        Some(v) => vec![(0, text(v))],
    }
}

/// Every dimension some sample has, as a table; `items[i]` is the result of `samples[i]`.
pub fn slice_tables(samples: &[Sample], items: &[ItemResult]) -> Vec<SliceTable> {
    DIMENSIONS
        .iter()
        .filter_map(|(name, values)| {
            let mut rows: BTreeMap<(usize, String), Tally> = BTreeMap::new();
            for (sample, item) in samples.iter().zip(items) {
                for key in values(sample, item) {
                    rows.entry(key).or_default().add(item);
                }
            }
            (!rows.is_empty()).then(|| SliceTable {
                dimension: name.to_string(),
                rows: rows
                    .into_iter()
                    .map(|((_, value), tally)| SliceRow { value, tally })
                    .collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_buckets_have_inclusive_lower_bounds() {
        assert_eq!(size_bucket(Some(0.0)), (0, "< 0.1%"));
        assert_eq!(size_bucket(Some(0.000_999)), (0, "< 0.1%"));
        assert_eq!(size_bucket(Some(0.001)), (1, "0.1-1%"));
        assert_eq!(size_bucket(Some(0.01)), (2, "1-5%"));
        assert_eq!(size_bucket(Some(0.05)), (3, ">= 5%"));
        assert_eq!(size_bucket(Some(1.0)), (3, ">= 5%"));
        assert_eq!(size_bucket(None), (4, "refusal"));
    }
}
