//! `groundrl curate`: the multi-round curriculum (docs/design.md, "Curriculum"; semantics:
//! `groundrl_core::curriculum`).
//!
//! After a round, `groundrl rollout --reward SPEC --ledger L --round R` (or the trainer) records how many
//! of each sample's rollouts were correct; then:
//! - `curate next` builds the next round's data from that ledger;
//! - `curate compare` shows how samples moved between two rounds, and per source where k = 0 stays;
//! - `curate temperature` finds the highest sampling temperature whose accuracy holds.

pub mod compare;
pub mod next;
pub mod temperature;

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use groundrl_core::curriculum::{RoundSummary, read_ledger};

#[derive(clap::Subcommand)]
pub enum CurateCommand {
    /// The next round's data: drop samples with all rollouts correct, keep those with some, add a
    /// share of those with none.
    Next(next::Args),
    /// k-of-n transition matrix between two ledgers (or two rounds of one) and k per source.
    Compare(compare::Args),
    /// Accuracy at several sampling temperatures; picks the highest one within a tolerance of the best.
    Temperature(temperature::Args),
}

pub fn run(cmd: CurateCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        CurateCommand::Next(args) => next::run(args),
        CurateCommand::Compare(args) => compare::run(args),
        CurateCommand::Temperature(args) => temperature::run(args),
    }
}

/// A ledger's `round` (default: its latest) pooled per sample, and how many bad lines were skipped
/// (each listed on stderr). Entries logged twice (the same draw) count once, and are said.
pub(crate) fn read_round(path: &Path, round: Option<u32>) -> anyhow::Result<(RoundSummary, usize)> {
    let ledger = read_ledger(path)?;
    for e in &ledger.skipped {
        eprintln!("skipped: {e}");
    }
    if ledger.duplicates > 0 {
        eprintln!(
            "{}: {} duplicate entries (the same run, round, sample, step and seed logged again) \
             counted once",
            path.display(),
            ledger.duplicates
        );
    }
    let round = match round.or(ledger.latest_round()) {
        Some(round) => round,
        None => anyhow::bail!("{}: no valid ledger entries", path.display()),
    };
    let summary = ledger.summary(round)?;
    Ok((summary, ledger.skipped.len()))
}

/// `12.5%`, or `-` for a share that does not exist.
pub(crate) fn percent(share: Option<f64>) -> String {
    share.map_or("-".to_string(), |s| format!("{:.1}%", 100.0 * s))
}

/// Writes `dir/name` (creating `dir`) and says so on stdout.
pub(crate) fn write_output(dir: &Path, name: &str, contents: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(name);
    std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}
