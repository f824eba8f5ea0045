//! The next round's data pool, from the last round's ledger.
//!
//! The rule: samples whose rollouts were all correct (k = n) teach nothing more and are dropped;
//! samples with some correct rollouts (0 < k < n) are the GRPO signal and are all kept; samples with no
//! correct rollout (k = 0) are added back until they make up a target share of the pool (a share, not
//! all of them: hopeless samples give flat groups). Which k = 0 samples are taken is seeded and
//! prefix-stable: samples are ranked by `keyed(seed, id)` as in [`crate::data::split::subsample`],
//! so a larger share's choice contains a smaller one's.
//!
//! The share counts only the samples the ledger knows: a sample the ledger never saw (new data, or a
//! round that stopped before reaching it) has no known difficulty. Such samples are kept by default
//! ([`PoolOptions::keep_unseen`]): absence from the ledger says nothing against a sample, and dropping
//! them would shrink the data without a word. They are always listed in the report.
//!
//! Whole sources can be included or excluded (to remove ambiguous, noisy sources). The report
//! gives, per source, how many samples fell in each outcome and the share of k = 0 among those the
//! ledger saw: a source where most samples are never solved is where ambiguous or mislabeled data hides.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::Serialize;

use super::CurriculumError;
use super::ledger::{Outcome, RoundSummary};
use crate::data::split::subsample;
use groundrl_score::data::Sample;

/// How the next pool is made.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolOptions {
    /// Target share of k = 0 samples among the pool's samples the ledger knows, in [0, 1).
    pub zero_share: f64,
    /// Keep only samples of these sources; empty keeps every source.
    pub include_sources: Vec<String>,
    /// Leave out samples of these sources.
    pub exclude_sources: Vec<String>,
    /// Keep samples the ledger has no entry for.
    pub keep_unseen: bool,
    /// Seeds the choice of k = 0 samples.
    pub seed: u64,
}

impl Default for PoolOptions {
    fn default() -> Self {
        Self {
            zero_share: 0.2,
            include_sources: Vec::new(),
            exclude_sources: Vec::new(),
            keep_unseen: true,
            seed: 0,
        }
    }
}

/// The samples of the next round, in the data's order, with the report of how they were chosen.
#[derive(Clone, Debug, PartialEq)]
pub struct NextPool {
    pub samples: Vec<Sample>,
    pub report: PoolReport,
}

/// Counts of one source (or of all).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SourceCounts {
    /// Samples in the data.
    pub data: usize,
    /// Ledger outcomes of those samples: k = n, 0 < k < n, k = 0, and no entry.
    pub solved: usize,
    pub partial: usize,
    pub unsolved: usize,
    pub unseen: usize,
    /// Samples left out by the source filters (whatever their outcome).
    pub filtered: usize,
    /// k = 0 samples taken into the pool.
    pub unsolved_kept: usize,
    /// Samples without a ledger entry taken into the pool.
    pub unseen_kept: usize,
    /// Samples in the pool.
    pub kept: usize,
    /// unsolved / (solved + partial + unsolved); `None` when the ledger saw none of the source.
    pub unsolved_rate: Option<f64>,
}

/// How the pool was made: per-source counts, the share reached, what the ledger and data disagree on.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PoolReport {
    pub round: u32,
    pub rule: String,
    pub zero_share_target: f64,
    /// The k = 0 share reached among the pool's ledger-known samples; `None` when it has none.
    pub zero_share: Option<f64>,
    pub total: SourceCounts,
    pub by_source: BTreeMap<String, SourceCounts>,
    /// Ids of data samples without a ledger entry, in the data's order.
    pub unseen: Vec<String>,
    /// Whether those were kept.
    pub unseen_kept: bool,
    /// Samples the ledger has but the data lacks.
    pub ledger_only: usize,
    /// Names given to the source filters that no data sample has (typos, or sources already gone).
    pub unmatched_sources: Vec<String>,
}

/// How many of `available` k = 0 samples to add to `partial` kept ones so that their share of the
/// whole comes closest to `share` (the smaller count on a tie), capped at `available`.
pub fn zero_count(partial: usize, available: usize, share: f64) -> usize {
    let exact = share * partial as f64 / (1.0 - share);
    let below = exact.floor() as usize;
    let error = |z: usize| match partial + z {
        0 => share,
        total => (z as f64 / total as f64 - share).abs(),
    };
    let closest = if error(below + 1) < error(below) {
        below + 1
    } else {
        below
    };
    closest.min(available)
}

/// The next round's pool from `data` and the last round's `summary` (see the module doc).
pub fn next_pool(
    data: Vec<Sample>,
    summary: &RoundSummary,
    options: &PoolOptions,
) -> Result<NextPool, CurriculumError> {
    check_options(options)?;
    let outcomes: Vec<Option<Outcome>> = data
        .iter()
        .map(|s| summary.samples.get(&s.id).map(|t| t.outcome()))
        .collect();
    let allowed: Vec<bool> = data.iter().map(|s| source_allowed(&s.source, options)).collect();
    let chosen_unsolved = choose_unsolved(&data, &outcomes, &allowed, options);
    let data_ids: HashSet<&str> = data.iter().map(|s| s.id.as_str()).collect();
    let ledger_only = summary
        .samples
        .keys()
        .filter(|id| !data_ids.contains(id.as_str()))
        .count();

    let mut report = PoolReport {
        round: summary.round,
        rule: summary.rule.clone(),
        zero_share_target: options.zero_share,
        zero_share: None,
        total: SourceCounts::default(),
        by_source: BTreeMap::new(),
        unseen: Vec::new(),
        unseen_kept: options.keep_unseen,
        ledger_only,
        unmatched_sources: unmatched_sources(&data, options),
    };
    let mut samples = Vec::new();
    for ((sample, outcome), allowed) in data.into_iter().zip(outcomes).zip(allowed) {
        let keep = allowed
            && match outcome {
                Some(Outcome::Solved) => false,
                Some(Outcome::Partial) => true,
                Some(Outcome::Unsolved) => chosen_unsolved.contains(sample.id.as_str()),
                None => options.keep_unseen,
            };
        count(&mut report, &sample, outcome, allowed, keep);
        if keep {
            samples.push(sample);
        }
    }
    finish_counts(&mut report);
    Ok(NextPool { samples, report })
}

fn check_options(options: &PoolOptions) -> Result<(), CurriculumError> {
    if !(0.0..1.0).contains(&options.zero_share) {
        let problem = format!("{} is not in [0, 1)", options.zero_share);
        return Err(CurriculumError::invalid("zero share", problem));
    }
    if let Some(both) = options
        .include_sources
        .iter()
        .find(|s| options.exclude_sources.contains(s))
    {
        let problem = format!("{both:?} is both included and excluded");
        return Err(CurriculumError::invalid("source filters", problem));
    }
    Ok(())
}

fn source_allowed(source: &str, options: &PoolOptions) -> bool {
    let included = options.include_sources.is_empty() || options.include_sources.iter().any(|s| s == source);
    included && !options.exclude_sources.iter().any(|s| s == source)
}

/// The ids of the k = 0 samples that go into the pool.
fn choose_unsolved(
    data: &[Sample],
    outcomes: &[Option<Outcome>],
    allowed: &[bool],
    options: &PoolOptions,
) -> HashSet<String> {
    let kept_partial = (0..data.len())
        .filter(|&i| allowed[i] && outcomes[i] == Some(Outcome::Partial))
        .count();
    let candidates: Vec<Sample> = (0..data.len())
        .filter(|&i| allowed[i] && outcomes[i] == Some(Outcome::Unsolved))
        .map(|i| data[i].clone())
        .collect();
    let wanted = zero_count(kept_partial, candidates.len(), options.zero_share);
    subsample(candidates, wanted, options.seed)
        .into_iter()
        .map(|s| s.id)
        .collect()
}

fn unmatched_sources(data: &[Sample], options: &PoolOptions) -> Vec<String> {
    let present: BTreeSet<&str> = data.iter().map(|s| s.source.as_str()).collect();
    let named: BTreeSet<&String> = options
        .include_sources
        .iter()
        .chain(&options.exclude_sources)
        .collect();
    named
        .into_iter()
        .filter(|s| !present.contains(s.as_str()))
        .cloned()
        .collect()
}

fn count(report: &mut PoolReport, sample: &Sample, outcome: Option<Outcome>, allowed: bool, keep: bool) {
    if outcome.is_none() {
        report.unseen.push(sample.id.clone());
    }
    let source = report.by_source.entry(sample.source.clone()).or_default();
    for counts in [source, &mut report.total] {
        counts.data += 1;
        match outcome {
            Some(Outcome::Solved) => counts.solved += 1,
            Some(Outcome::Partial) => counts.partial += 1,
            Some(Outcome::Unsolved) => counts.unsolved += 1,
            None => counts.unseen += 1,
        }
        counts.filtered += usize::from(!allowed);
        counts.unsolved_kept += usize::from(keep && outcome == Some(Outcome::Unsolved));
        counts.unseen_kept += usize::from(keep && outcome.is_none());
        counts.kept += usize::from(keep);
    }
}

fn finish_counts(report: &mut PoolReport) {
    for counts in report.by_source.values_mut().chain([&mut report.total]) {
        let seen = counts.solved + counts.partial + counts.unsolved;
        counts.unsolved_rate = (seen > 0).then(|| counts.unsolved as f64 / seen as f64);
    }
    let known_kept = report.total.kept - report.total.unseen_kept;
    report.zero_share = (known_kept > 0).then(|| report.total.unsolved_kept as f64 / known_kept as f64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::curriculum::testing::{sample, summary};
    use crate::rng::keyed;

    #[test]
    fn zero_count_comes_closest_to_the_share() {
        assert_eq!(zero_count(8, 10, 0.2), 2, "2 / 10 is exactly 20%");
        assert_eq!(zero_count(9, 10, 0.2), 2, "2 / 11 = 18.2% beats 3 / 12 = 25%");
        assert_eq!(zero_count(10, 10, 0.2), 3, "3 / 13 = 23.1% beats 2 / 12 = 16.7%");
        assert_eq!(zero_count(4, 100, 0.5), 4);
        assert_eq!(zero_count(1, 100, 0.9), 9);
        assert_eq!(zero_count(8, 1, 0.2), 1, "capped at the k = 0 samples there are");
        assert_eq!(zero_count(0, 5, 0.2), 0, "no share of an empty pool");
        assert_eq!(zero_count(5, 5, 0.0), 0);
    }

    /// web: 2 solved, 4 partial, 3 unsolved, 1 unseen; app: 4 partial, 5 unsolved, 1 solved;
    /// noisy: 4 unsolved, 1 partial. The ledger also knows `gone`, which the data lacks.
    fn data_and_summary() -> (Vec<Sample>, RoundSummary) {
        let ledger = [
            ("w-solved1", "web", 8, 8),
            ("w-solved2", "web", 8, 8),
            ("w-p1", "web", 8, 1),
            ("w-p2", "web", 8, 3),
            ("w-p3", "web", 8, 5),
            ("w-p4", "web", 8, 7),
            ("w-z1", "web", 8, 0),
            ("w-z2", "web", 8, 0),
            ("w-z3", "web", 8, 0),
            ("a-p1", "app", 8, 2),
            ("a-p2", "app", 8, 4),
            ("a-p3", "app", 8, 6),
            ("a-p4", "app", 8, 1),
            ("a-z1", "app", 8, 0),
            ("a-z2", "app", 8, 0),
            ("a-z3", "app", 8, 0),
            ("a-z4", "app", 8, 0),
            ("a-z5", "app", 8, 0),
            ("a-solved", "app", 8, 8),
            ("x-z1", "noisy", 8, 0),
            ("x-z2", "noisy", 8, 0),
            ("x-z3", "noisy", 8, 0),
            ("x-z4", "noisy", 8, 0),
            ("x-p1", "noisy", 8, 4),
            ("gone", "web", 8, 2),
        ];
        let mut data: Vec<Sample> = ledger[..24]
            .iter()
            .map(|&(id, source, _, _)| sample(id, source))
            .collect();
        data.insert(3, sample("w-new", "web"));
        (data, summary(&ledger))
    }

    fn ids(samples: &[Sample]) -> Vec<&str> {
        samples.iter().map(|s| s.id.as_str()).collect()
    }

    #[test]
    fn the_pool_drops_solved_keeps_partial_and_adds_a_share_of_unsolved() {
        let (data, summary) = data_and_summary();
        let pool = next_pool(data, &summary, &PoolOptions::default()).unwrap();
        // 9 partial kept; 2 / 11 is the closest to 20% (zero_count(9, 12, 0.2) = 2).
        assert_eq!(
            ids(&pool.samples),
            [
                "w-p1", "w-new", "w-p2", "w-p3", "w-p4", "a-p1", "a-p2", "a-p3", "a-p4", "a-z1", "x-z4",
                "x-p1"
            ]
        );
        // The two are the first unsolved ids in the seeded order.
        let mut unsolved = vec![
            "w-z1", "w-z2", "w-z3", "a-z1", "a-z2", "a-z3", "a-z4", "a-z5", "x-z1", "x-z2", "x-z3", "x-z4",
        ];
        unsolved.sort_by_key(|id| keyed(0, id));
        let mut first_two = unsolved[..2].to_vec();
        first_two.sort();
        assert_eq!(first_two, ["a-z1", "x-z4"]);

        let r = &pool.report;
        assert_eq!(r.zero_share, Some(2.0 / 11.0));
        assert_eq!((r.unseen.clone(), r.ledger_only), (vec!["w-new".to_string()], 1));
        let web = &r.by_source["web"];
        assert_eq!(
            (
                web.data,
                web.solved,
                web.partial,
                web.unsolved,
                web.unseen,
                web.kept
            ),
            (10, 2, 4, 3, 1, 5)
        );
        assert_eq!(web.unsolved_rate, Some(3.0 / 9.0));
        assert_eq!(r.by_source["app"].unsolved_rate, Some(0.5));
        assert_eq!(r.by_source["noisy"].unsolved_rate, Some(0.8));
        assert_eq!((r.total.data, r.total.kept, r.total.unsolved_kept), (25, 12, 2));
        assert_eq!(r.total.unsolved_rate, Some(0.5), "12 unsolved of 24 seen");
    }

    #[test]
    fn a_larger_share_takes_more_unsolved_samples_and_keeps_the_smaller_choice() {
        let (data, summary) = data_and_summary();
        let options = PoolOptions {
            zero_share: 0.3,
            ..PoolOptions::default()
        };
        let pool = next_pool(data, &summary, &options).unwrap();
        let unsolved: Vec<&str> = ids(&pool.samples)
            .into_iter()
            .filter(|id| id.contains("-z"))
            .collect();
        // zero_count(9, 12, 0.3) = 4: 4 / 13 = 30.8%.
        assert_eq!(unsolved.len(), 4);
        assert!(
            unsolved.contains(&"a-z1") && unsolved.contains(&"x-z4"),
            "{unsolved:?}"
        );
        assert_eq!(pool.report.zero_share, Some(4.0 / 13.0));
    }

    #[test]
    fn source_filters_and_unseen_samples() {
        let (data, summary) = data_and_summary();
        let without_noisy = PoolOptions {
            exclude_sources: vec!["noisy".into()],
            ..PoolOptions::default()
        };
        let pool = next_pool(data.clone(), &summary, &without_noisy).unwrap();
        // 8 partial, 8 unsolved candidates: 2 / 10 = 20% exactly.
        assert_eq!(pool.samples.len(), 8 + 2 + 1);
        assert!(pool.samples.iter().all(|s| s.source != "noisy"));
        assert_eq!(pool.report.by_source["noisy"].filtered, 5);
        assert_eq!(pool.report.zero_share, Some(0.2));

        let web_only = PoolOptions {
            include_sources: vec!["web".into(), "webb".into()],
            keep_unseen: false,
            ..PoolOptions::default()
        };
        let pool = next_pool(data.clone(), &summary, &web_only).unwrap();
        // 4 partial and 1 of 3 unsolved (1 / 5 = 20%); the unseen sample is dropped but listed.
        let unsolved: Vec<&str> = ids(&pool.samples)
            .into_iter()
            .filter(|id| id.contains("-z"))
            .collect();
        assert_eq!(ids(&pool.samples).len(), 5);
        assert_eq!(unsolved.len(), 1);
        assert_eq!(pool.report.unseen, ["w-new"]);
        assert_eq!(pool.report.unmatched_sources, ["webb"]);
        assert_eq!(pool.report.total.filtered, 15);

        let both = PoolOptions {
            include_sources: vec!["web".into()],
            exclude_sources: vec!["web".into()],
            ..PoolOptions::default()
        };
        let err = next_pool(data.clone(), &summary, &both).unwrap_err();
        assert_eq!(
            err.to_string(),
            "source filters: \"web\" is both included and excluded"
        );
        let all_zero = PoolOptions {
            zero_share: 1.0,
            ..PoolOptions::default()
        };
        let err = next_pool(data, &summary, &all_zero).unwrap_err();
        assert_eq!(err.to_string(), "zero share: 1 is not in [0, 1)");
    }
}
