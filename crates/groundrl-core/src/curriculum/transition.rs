//! How samples moved between two rounds, and where the unsolved ones come from.
//!
//! The "life-cycle" of samples across rounds is read from a k-of-8 transition matrix (rows:
//! correct rollouts before, columns: after) over the samples rolled out in both rounds, and from the
//! distribution of k per source. Both need one n for every sample (k of 8 and k of 16 are different
//! scales), which offline rollouts with a fixed `--n` give; a trainer's ledger, where a sample seen in
//! two epochs has twice the rollouts, does not.

use std::collections::BTreeMap;

use serde::Serialize;

use super::CurriculumError;
use super::ledger::RoundSummary;
use crate::plot::{BarChart, BarSeries, Heatmap};

/// Samples of both rounds counted by (k before, k after).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Transition {
    pub before_round: u32,
    pub after_round: u32,
    /// Rollouts per sample in both rounds.
    pub n: u64,
    /// `counts[k_before][k_after]`, an (n + 1) x (n + 1) matrix.
    pub counts: Vec<Vec<u64>>,
    /// Samples in both rounds (the matrix's total).
    pub shared: usize,
    pub only_before: usize,
    pub only_after: usize,
    /// Shared samples with more correct rollouts after (above the diagonal), as many, and fewer.
    pub improved: usize,
    pub unchanged: usize,
    pub worsened: usize,
}

/// Per source, how many samples had each k: `sources[source][k]`, k = 0..=n.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KBySource {
    pub round: u32,
    pub n: u64,
    pub sources: BTreeMap<String, Vec<u64>>,
}

/// The n every sample of `summary` shares; an error names two samples that differ.
pub fn common_n(summary: &RoundSummary) -> Result<u64, CurriculumError> {
    let what = || format!("round {}", summary.round);
    let mut samples = summary.samples.iter();
    let Some((first_id, first)) = samples.next() else {
        return Err(CurriculumError::invalid(what(), "no samples"));
    };
    match samples.find(|(_, t)| t.n != first.n) {
        None => Ok(first.n),
        Some((id, other)) => {
            let problem = format!(
                "samples have different numbers of rollouts ({first_id}: n = {}, {id}: n = {}); a k-of-n \
                 table needs one n, as offline rollouts with a fixed --n give",
                first.n, other.n
            );
            Err(CurriculumError::invalid(what(), problem))
        }
    }
}

/// The k-of-n transition matrix from `before` to `after` over the samples of both.
pub fn transition(before: &RoundSummary, after: &RoundSummary) -> Result<Transition, CurriculumError> {
    let n = common_n(before)?;
    let n_after = common_n(after)?;
    if n != n_after {
        let what = format!("rounds {} and {}", before.round, after.round);
        let problem =
            format!("n = {n} before but n = {n_after} after; k-of-n counts of different n do not compare");
        return Err(CurriculumError::invalid(what, problem));
    }
    let size = n as usize + 1;
    let mut t = Transition {
        before_round: before.round,
        after_round: after.round,
        n,
        counts: vec![vec![0; size]; size],
        shared: 0,
        only_before: 0,
        only_after: after
            .samples
            .keys()
            .filter(|id| !before.samples.contains_key(*id))
            .count(),
        improved: 0,
        unchanged: 0,
        worsened: 0,
    };
    for (id, b) in &before.samples {
        let Some(a) = after.samples.get(id) else {
            t.only_before += 1;
            continue;
        };
        t.counts[b.k as usize][a.k as usize] += 1;
        t.shared += 1;
        match a.k.cmp(&b.k) {
            std::cmp::Ordering::Greater => t.improved += 1,
            std::cmp::Ordering::Equal => t.unchanged += 1,
            std::cmp::Ordering::Less => t.worsened += 1,
        }
    }
    Ok(t)
}

/// How many samples of each source had each k.
pub fn k_by_source(summary: &RoundSummary) -> Result<KBySource, CurriculumError> {
    let n = common_n(summary)?;
    let mut sources: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for tally in summary.samples.values() {
        let counts = sources
            .entry(tally.source.clone())
            .or_insert_with(|| vec![0; n as usize + 1]);
        counts[tally.k as usize] += 1;
    }
    Ok(KBySource {
        round: summary.round,
        n,
        sources,
    })
}

/// `0`, `1`, ..., `n`: the labels of k.
fn k_labels(n: u64) -> impl Iterator<Item = String> {
    (0..=n).map(|k| k.to_string())
}

impl Transition {
    /// The matrix as a heatmap with the count in each cell (rows: k before, columns: k after).
    pub fn heatmap(&self) -> Heatmap {
        Heatmap {
            title: format!(
                "k of {} correct, round {} to round {} ({} samples in both)",
                self.n, self.before_round, self.after_round, self.shared
            ),
            x_label: format!("k after (round {})", self.after_round),
            y_label: format!("k before (round {})", self.before_round),
            rows: k_labels(self.n).collect(),
            columns: k_labels(self.n).collect(),
            values: self
                .counts
                .iter()
                .map(|row| row.iter().map(|&c| c as f64).collect())
                .collect(),
        }
    }
}

impl KBySource {
    /// Bars per source, one per k, each the share of the source's samples with that k (so sources of
    /// different sizes compare; the counts are in the struct itself).
    pub fn bar_chart(&self) -> BarChart {
        let totals: Vec<u64> = self.sources.values().map(|counts| counts.iter().sum()).collect();
        let series = (0..=self.n as usize)
            .map(|k| {
                let shares = self
                    .sources
                    .values()
                    .zip(&totals)
                    .map(|(counts, &total)| counts[k] as f64 / total.max(1) as f64)
                    .collect();
                BarSeries::new(format!("k = {k}"), shares)
            })
            .collect();
        BarChart {
            title: format!(
                "round {}: k of {} correct per source ({} samples)",
                self.round,
                self.n,
                totals.iter().sum::<u64>()
            ),
            x_label: "source".into(),
            y_label: "share of the source's samples".into(),
            categories: self.sources.keys().cloned().collect(),
            series,
            y_range: Some((0.0, 1.0)),
            show_values: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::curriculum::testing::summary;

    #[test]
    fn the_matrix_counts_shared_samples_by_k_before_and_after() {
        let before = summary(&[
            ("a", "web", 4, 0),
            ("b", "web", 4, 0),
            ("c", "web", 4, 2),
            ("d", "app", 4, 3),
            ("e", "app", 4, 4),
            ("gone", "app", 4, 1),
        ]);
        let after = summary(&[
            ("a", "web", 4, 0),
            ("b", "web", 4, 1),
            ("c", "web", 4, 4),
            ("d", "app", 4, 4),
            ("e", "app", 4, 3),
            ("new1", "web", 4, 2),
            ("new2", "web", 4, 2),
        ]);
        let t = transition(&before, &after).unwrap();
        assert_eq!(
            t.counts,
            [
                [1, 1, 0, 0, 0],
                [0, 0, 0, 0, 0],
                [0, 0, 0, 0, 1],
                [0, 0, 0, 0, 1],
                [0, 0, 0, 1, 0],
            ]
        );
        assert_eq!((t.n, t.shared, t.only_before, t.only_after), (4, 5, 1, 2));
        assert_eq!((t.improved, t.unchanged, t.worsened), (3, 1, 1));

        let map = t.heatmap();
        assert_eq!(
            map.title,
            "k of 4 correct, round 1 to round 1 (5 samples in both)"
        );
        assert_eq!(map.rows, ["0", "1", "2", "3", "4"]);
        assert_eq!(map.columns, map.rows);
        assert_eq!(map.values[0], [1.0, 1.0, 0.0, 0.0, 0.0]);
        assert_eq!(map.values[4], [0.0, 0.0, 0.0, 1.0, 0.0]);
    }

    #[test]
    fn k_is_counted_per_source() {
        let s = summary(&[
            ("a", "web", 2, 0),
            ("b", "web", 2, 0),
            ("c", "web", 2, 2),
            ("d", "app", 2, 1),
        ]);
        let by = k_by_source(&s).unwrap();
        assert_eq!(by.n, 2);
        assert_eq!(by.sources["web"], [2, 0, 1]);
        assert_eq!(by.sources["app"], [0, 1, 0]);
        assert_eq!(by.sources.len(), 2);

        // Sources in name order (app, web); each bar the share of its source's samples.
        let chart = by.bar_chart();
        assert_eq!(chart.categories, ["app", "web"]);
        assert_eq!(chart.title, "round 1: k of 2 correct per source (4 samples)");
        let series: Vec<(&str, &[f64])> = chart
            .series
            .iter()
            .map(|s| (s.name.as_str(), &s.values[..]))
            .collect();
        assert_eq!(
            series,
            [
                ("k = 0", &[0.0, 2.0 / 3.0][..]),
                ("k = 1", &[1.0, 0.0][..]),
                ("k = 2", &[0.0, 1.0 / 3.0][..])
            ]
        );
    }

    #[test]
    fn different_n_is_an_error_naming_the_samples() {
        let mixed = summary(&[("a", "web", 8, 1), ("b", "web", 16, 2)]);
        let err = k_by_source(&mixed).unwrap_err().to_string();
        assert!(
            err.starts_with("round 1: samples have different numbers of rollouts (a: n = 8, b: n = 16)"),
            "{err}"
        );
        let eight = summary(&[("a", "web", 8, 1)]);
        let sixteen = summary(&[("a", "web", 16, 1)]);
        assert_eq!(
            transition(&eight, &sixteen).unwrap_err().to_string(),
            "rounds 1 and 1: n = 8 before but n = 16 after; k-of-n counts of different n do not compare"
        );
    }
}
