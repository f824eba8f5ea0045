//! Multi-round curriculum: which samples the next round of RL trains on, and at what temperature.
//!
//! The recipe (docs/design.md, "Curriculum"), after each round: drop the samples whose rollouts were all
//! correct, keep those with some correct rollouts, add back enough samples with no correct rollout that they
//! make up about 20% of the pool, and raise the sampling temperature to the highest one where accuracy holds.
//! The pieces, each usable from a training loop or from `groundrl curate`:
//!
//! - [`ledger`]: one [`LedgerEntry`] per (sample, round, rollout batch) with `k` correct of `n`
//!   rollouts, appended by [`LedgerWriter`], read back by [`read_ledger`] and pooled per sample and
//!   round into a [`RoundSummary`];
//! - [`pool`]: the next round's samples from a summary ([`next_pool`]), with per-source counts;
//! - [`transition`]: how samples moved between two rounds (the k-of-n [`Transition`] matrix) and the
//!   distribution of k per source ([`KBySource`]);
//! - [`temperature`]: the highest temperature whose accuracy is within a tolerance of the best
//!   ([`pick_temperature`]).
//!
//! A training loop writes one entry per sample of each rollout batch:
//!
//! ```no_run
//! # fn main() -> Result<(), groundrl_core::curriculum::CurriculumError> {
//! use groundrl_core::curriculum::{LedgerEntry, LedgerWriter, RolloutBatch, rule_text};
//! # let (sample, records): (groundrl_score::data::Sample, Vec<groundrl_core::telemetry::CompletionRecord>) = todo!();
//! let mut ledger = LedgerWriter::open("run/ledger.jsonl")?;
//! let batch = RolloutBatch {
//!     run: "grpo".into(), round: 1, step: 12, temperature: 1.1, rule: rule_text("click", 1.0),
//! };
//! let draw_seed = 7301;
//! ledger.append(&[LedgerEntry::from_records(&sample, &batch, draw_seed, &records)?])?;
//! # Ok(()) }
//! ```

pub mod ledger;
pub mod pool;
pub mod temperature;
pub mod transition;

pub use ledger::{
    DrawKey, Ledger, LedgerEntry, LedgerWriter, Outcome, RolloutBatch, RoundSummary, Tally, drop_after_step,
    read_ledger, rule_text, write_ledger,
};
pub use pool::{NextPool, PoolOptions, PoolReport, SourceCounts, next_pool, zero_count};
pub use temperature::{Sweep, SweepPoint, pick_temperature};
pub use transition::{KBySource, Transition, k_by_source, transition};

use crate::telemetry::TelemetryError;
use groundrl_score::data::RecordError;

/// Why a ledger could not be read, written or used.
#[derive(Debug, thiserror::Error)]
pub enum CurriculumError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    /// One ledger line that is not a valid entry: `file: line N: field: problem`.
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Write(#[from] TelemetryError),
    /// An entry, an option or a combination of ledgers that cannot be used: `what: problem`.
    #[error("{what}: {problem}")]
    Invalid { what: String, problem: String },
}

impl CurriculumError {
    fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.display().to_string(),
            source,
        }
    }

    fn invalid(what: impl Into<String>, problem: impl Into<String>) -> Self {
        Self::Invalid {
            what: what.into(),
            problem: problem.into(),
        }
    }
}

/// Ledgers for this module's tests.
#[cfg(test)]
mod testing {
    use super::{Ledger, LedgerEntry, RoundSummary};
    use groundrl_score::data::Sample;

    /// A point-grounding sample with one 10x10 image and no target.
    pub fn sample(id: &str, source: &str) -> Sample {
        let line = format!(
            r#"{{"id":"{id}","source":"{source}","task":"point_grounding","images":[{{"path":"a.png","width":10,"height":10}}],"instruction":"x","targets":[],"frame":"pixel"}}"#
        );
        serde_json::from_str(&line).expect("a valid test sample")
    }

    /// An offline entry (step 0, temperature 1) under the rule `click >= 1`.
    pub fn entry(id: &str, source: &str, round: u32, n: u32, k: u32, mean_reward: f64) -> LedgerEntry {
        LedgerEntry {
            id: id.into(),
            source: source.into(),
            round,
            step: 0,
            n,
            k,
            mean_reward,
            temperature: 1.0,
            rule: "click >= 1".into(),
            run: String::new(),
            draw: None,
        }
    }

    /// The round-1 summary of one entry per `(id, source, n, k)`.
    pub fn summary(samples: &[(&str, &str, u32, u32)]) -> RoundSummary {
        let entries = samples
            .iter()
            .map(|&(id, source, n, k)| entry(id, source, 1, n, k, 0.0))
            .collect();
        let ledger = Ledger {
            path: "l.jsonl".into(),
            entries,
            ..Ledger::default()
        };
        ledger.summary(1).expect("a valid test ledger")
    }
}
