//! `groundrl curate compare`: how samples moved between two rounds (semantics:
//! `groundrl_core::curriculum::transition`). Writes to `DIR`: `compare.json` (both sides, the matrix, k
//! per source), `transition.svg` (the matrix as a heatmap with counts), `by-source.svg` (k per source
//! in the later round) and `by-source-before.svg` (the same for the earlier one).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use groundrl_core::curriculum::{KBySource, RoundSummary, Transition, k_by_source, transition};
use serde::Serialize;

use super::{read_round, write_output};

#[derive(clap::Args)]
pub struct Args {
    /// The earlier round's ledger.
    #[arg(long)]
    before: PathBuf,
    /// The later round's ledger (may be the same file, with --before-round and --after-round).
    #[arg(long)]
    after: PathBuf,
    /// Round of --before to read (default: its latest).
    #[arg(long)]
    before_round: Option<u32>,
    /// Round of --after to read (default: its latest).
    #[arg(long)]
    after_round: Option<u32>,
    /// Output folder for compare.json, transition.svg, by-source.svg and by-source-before.svg.
    #[arg(long)]
    out: PathBuf,
}

/// One side of the comparison.
#[derive(Serialize)]
struct Side<'a> {
    ledger: &'a Path,
    round: u32,
    rule: &'a str,
    samples: usize,
    /// Per source, samples with k = 0, 1, ..., n correct.
    k_by_source: &'a KBySource,
}

/// `compare.json`.
#[derive(Serialize)]
struct Comparison<'a> {
    before: Side<'a>,
    after: Side<'a>,
    transition: &'a Transition,
}

/// Prints the matrix and writes the JSON and the charts; exit code 1 when ledger lines were skipped.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (before, bad_before) = read_round(&args.before, args.before_round)?;
    let (after, bad_after) = read_round(&args.after, args.after_round)?;
    if before.rule != after.rule {
        eprintln!(
            "warning: the rounds judged correctness differently ({:?} before, {:?} after)",
            before.rule, after.rule
        );
    }
    let t = transition(&before, &after)
        .with_context(|| format!("{} against {}", args.before.display(), args.after.display()))?;
    let by_before = k_by_source(&before)?;
    let by_after = k_by_source(&after)?;
    let comparison = Comparison {
        before: side(&args.before, &before, &by_before),
        after: side(&args.after, &after, &by_after),
        transition: &t,
    };
    print!("{}", matrix_text(&t, &before, &after));
    write_output(
        &args.out,
        "compare.json",
        &serde_json::to_string_pretty(&comparison)?,
    )?;
    write_output(&args.out, "transition.svg", &t.heatmap().svg())?;
    write_output(&args.out, "by-source.svg", &by_after.bar_chart().svg())?;
    write_output(&args.out, "by-source-before.svg", &by_before.bar_chart().svg())?;
    Ok(if bad_before + bad_after > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn side<'a>(ledger: &'a Path, summary: &'a RoundSummary, by_source: &'a KBySource) -> Side<'a> {
    Side {
        ledger,
        round: summary.round,
        rule: &summary.rule,
        samples: summary.samples.len(),
        k_by_source: by_source,
    }
}

fn matrix_text(t: &Transition, before: &RoundSummary, after: &RoundSummary) -> String {
    let mut text = format!(
        "k of {} correct, round {} (rows) to round {} (columns): {} samples in both ({} only before, {} only \
         after); {} improved, {} unchanged, {} worsened\n",
        t.n,
        before.round,
        after.round,
        t.shared,
        t.only_before,
        t.only_after,
        t.improved,
        t.unchanged,
        t.worsened
    );
    text += "      ";
    for k in 0..=t.n {
        text += &format!("{k:>7}");
    }
    text.push('\n');
    for (k, row) in t.counts.iter().enumerate() {
        text += &format!("{k:>6}");
        for count in row {
            text += &format!("{count:>7}");
        }
        text.push('\n');
    }
    text
}
