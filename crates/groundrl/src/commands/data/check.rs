//! `groundrl data check`: samples against their images (exist, decode, stated size, targets well formed
//! and inside the image in their frame). Prints each issue, then counts per problem and source, and
//! optionally writes preview PNGs with targets and instructions drawn. Exits 1 if there is any issue.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use groundrl_core::data::check::{check, write_previews};

use super::{read_samples, report_skipped};

#[derive(clap::Args)]
pub struct Args {
    /// Sample file (.jsonl or .parquet); relative image paths are relative to its folder.
    #[arg(long)]
    input: PathBuf,
    /// Folder for preview PNGs (targets outlined in magenta, instruction on top).
    #[arg(long)]
    previews: Option<PathBuf>,
    /// How many previews, spread evenly over the file.
    #[arg(long, default_value_t = 8)]
    n_previews: usize,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let loaded = read_samples(&args.input)?;
    report_skipped(&loaded.skipped, false)?;
    let base = args.input.parent().unwrap_or(Path::new("."));
    let report = check(&loaded.samples, base);
    for issue in &report.issues {
        println!("{issue}");
    }
    println!(
        "checked {} samples from {}: {} issues, {} unreadable records",
        report.samples,
        args.input.display(),
        report.issues.len(),
        loaded.skipped.len()
    );
    for ((problem, source), count) in report.counts() {
        println!("  {}\t{source}\t{count}", problem.name());
    }
    if let Some(folder) = &args.previews {
        let written = write_previews(&loaded.samples, base, folder, args.n_previews)?;
        println!("wrote {} previews to {}", written.len(), folder.display());
    }
    let clean = report.issues.is_empty() && loaded.skipped.is_empty();
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
