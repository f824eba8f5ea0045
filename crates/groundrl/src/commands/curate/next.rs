//! `groundrl curate next`: the next round's data pool from a ledger (rules:
//! `groundrl_core::curriculum::pool`).
//!
//! Samples of the data without a ledger entry are kept unless `--drop-unseen`: having no entry says
//! nothing about a sample's difficulty (new data, or a round that ended before reaching it), and
//! dropping it would shrink the data silently. They are counted and named either way.

use std::path::PathBuf;
use std::process::ExitCode;

use groundrl_core::curriculum::{PoolOptions, PoolReport, SourceCounts, next_pool};

use super::{percent, read_round};
use crate::commands::data::{folder_of, read_samples, report_skipped, write_rebased};

/// Unseen ids printed before the list is cut short (`--json` has them all).
const UNSEEN_SHOWN: usize = 10;

#[derive(clap::Args)]
pub struct Args {
    /// The pass-rate ledger (JSONL) of the last round.
    #[arg(long)]
    ledger: PathBuf,
    /// The samples to choose from (.jsonl or .parquet), usually the last round's data.
    #[arg(long)]
    data: PathBuf,
    /// The next round's samples (.jsonl or .parquet).
    #[arg(long)]
    out: PathBuf,
    /// The ledger round to read (default: its latest).
    #[arg(long)]
    round: Option<u32>,
    /// Target share of samples with no correct rollout (k = 0) among the pool's samples the ledger
    /// knows (docs/design.md, "Curriculum").
    #[arg(long, default_value_t = 0.2)]
    zero_share: f64,
    /// Keep only these sources (comma-separated).
    #[arg(long, value_delimiter = ',')]
    include_source: Vec<String>,
    /// Leave out these sources (comma-separated), e.g. ambiguous or noisy ones.
    #[arg(long, value_delimiter = ',')]
    exclude_source: Vec<String>,
    /// Drop samples the ledger has no entry for (kept by default).
    #[arg(long)]
    drop_unseen: bool,
    /// Seeds which k = 0 samples are taken.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

/// Writes the pool and prints the report; exit code 1 when ledger lines or data records were skipped.
/// An empty pool is written and warned about: a next round would have nothing to train on.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (summary, bad_lines) = read_round(&args.ledger, args.round)?;
    let loaded = read_samples(&args.data)?;
    report_skipped(&loaded.skipped, false)?;
    let options = PoolOptions {
        zero_share: args.zero_share,
        include_sources: args.include_source.clone(),
        exclude_sources: args.exclude_source.clone(),
        keep_unseen: !args.drop_unseen,
        seed: args.seed,
    };
    let pool = next_pool(loaded.samples, &summary, &options)?;
    write_rebased(&args.out, &pool.samples, folder_of(&args.data))?;
    for source in &pool.report.unmatched_sources {
        eprintln!("warning: no sample of the data has source {source:?} (named in a source filter)");
    }
    if args.json {
        println!("{}", serde_json::to_string(&pool.report)?);
    } else {
        print!("{}", report_text(&pool.report, &args));
    }
    if pool.samples.is_empty() {
        eprintln!(
            "warning: the pool is empty, nothing to train on next (the report above counts the \
             samples by outcome; a round's data needs samples with 0 < k < n, or unseen ones kept)"
        );
    }
    if bad_lines + loaded.skipped.len() > 0 {
        eprintln!(
            "{bad_lines} bad ledger line(s) and {} bad data record(s) skipped (listed above)",
            loaded.skipped.len()
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn report_text(r: &PoolReport, args: &Args) -> String {
    let mut text = format!(
        "round {} ({}): {} of {} samples written to {}\n",
        r.round,
        r.rule,
        r.total.kept,
        r.total.data,
        args.out.display()
    );
    text += &format!(
        "k = 0 share: {} of the pool's samples the ledger knows (target {})\n\n",
        percent(r.zero_share),
        percent(Some(r.zero_share_target))
    );
    text += &format!(
        "{:<24} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8} {:>8} {:>7} {:>9}\n",
        "source", "data", "k=n", "0<k<n", "k=0", "unseen", "filtered", "k=0 kept", "kept", "k=0 rate"
    );
    for (source, counts) in &r.by_source {
        text += &row(source, counts);
    }
    text += &row("all", &r.total);
    if !r.unseen.is_empty() {
        let shown: Vec<&str> = r.unseen.iter().take(UNSEEN_SHOWN).map(String::as_str).collect();
        let more = r.unseen.len().saturating_sub(UNSEEN_SHOWN);
        text += &format!(
            "\n{} sample(s) without a ledger entry, {}: {}{}\n",
            r.unseen.len(),
            if r.unseen_kept {
                "kept"
            } else {
                "dropped (--drop-unseen)"
            },
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        );
    }
    if r.ledger_only > 0 {
        text += &format!("{} ledger sample(s) are not in the data\n", r.ledger_only);
    }
    text
}

fn row(source: &str, c: &SourceCounts) -> String {
    format!(
        "{source:<24} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8} {:>8} {:>7} {:>9}\n",
        c.data,
        c.solved,
        c.partial,
        c.unsolved,
        c.unseen,
        c.filtered,
        c.unsolved_kept,
        c.kept,
        percent(c.unsolved_rate)
    )
}
