//! `groundrl data sample`: a seeded, prefix-stable subsample.
//!
//! Samples are ranked by a hash of (seed, id) and the first n kept, in input order. With one seed the
//! subset of 60 lies inside the subset of 100, and the choice does not depend on the file's order: a
//! fixed validation subset stays fixed.

use std::path::PathBuf;
use std::process::ExitCode;

use groundrl_core::data::split::subsample;

use super::{folder_of, print_read, print_written, read_samples, report_skipped, write_rebased};

#[derive(clap::Args)]
pub struct Args {
    /// Sample file (.jsonl or .parquet).
    #[arg(long)]
    input: PathBuf,
    /// How many samples to keep (all, if the input has fewer).
    #[arg(long)]
    n: usize,
    #[arg(long)]
    seed: u64,
    /// Output sample file (.jsonl or .parquet).
    #[arg(long)]
    output: PathBuf,
    /// Fail on the first bad record instead of skipping it.
    #[arg(long)]
    strict: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let loaded = read_samples(&args.input)?;
    report_skipped(&loaded.skipped, args.strict)?;
    print_read(&args.input, &loaded);
    let kept = subsample(loaded.samples, args.n, args.seed);
    write_rebased(&args.output, &kept, folder_of(&args.input))?;
    print_written(&args.output, &kept);
    Ok(ExitCode::SUCCESS)
}
