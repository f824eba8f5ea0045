//! How samples moved between two rounds, and where the unsolved ones come from.
//!
//! Seed 003 looked at the "life-cycle" of samples across rounds with a k-of-8 transition matrix (rows:
//! correct rollouts before, columns: after) over the samples rolled out in both rounds, and at the
//! distribution of k per source. Both need one n for every sample (k of 8 and k of 16 are different
//! scales), which offline rollouts with a fixed `--n` give; a trainer's ledger, where a sample seen in
//! two epochs has twice the rollouts, does not.

use std::collections::BTreeMap;

use serde::Serialize;

use super::CurriculumError;
use super::ledger::RoundSummary;

/// Samples of both rounds counted by (k before, k after).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Transition {
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
    Ok(KBySource { n, sources })
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
