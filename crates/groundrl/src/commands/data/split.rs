//! `groundrl data split`: seeded parts of exact sizes, written as `<out-dir>/<name>.<ext>`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use groundrl_core::data::split::{parse_ratios, split};

use super::{FileFormat, folder_of, print_read, print_written, read_samples, report_skipped, write_rebased};

#[derive(clap::Args)]
pub struct Args {
    /// Sample file (.jsonl or .parquet).
    #[arg(long)]
    input: PathBuf,
    /// Folder for the parts, created if missing; each part is written in the input's format.
    #[arg(long)]
    out_dir: PathBuf,
    /// Named ratios summing to 1, e.g. `train=0.9,val=0.1`.
    #[arg(long)]
    ratios: String,
    #[arg(long)]
    seed: u64,
    /// Fail on the first bad record instead of skipping it.
    #[arg(long)]
    strict: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let ratios = parse_ratios(&args.ratios)
        .map_err(anyhow::Error::msg)
        .context("--ratios")?;
    let format = FileFormat::of(&args.input)?;
    let loaded = read_samples(&args.input)?;
    report_skipped(&loaded.skipped, args.strict)?;
    print_read(&args.input, &loaded);
    for (name, part) in split(loaded.samples, &ratios, args.seed) {
        let path = args.out_dir.join(format!("{name}.{}", format.extension()));
        write_rebased(&path, &part, folder_of(&args.input))?;
        print_written(&path, &part);
    }
    Ok(ExitCode::SUCCESS)
}
