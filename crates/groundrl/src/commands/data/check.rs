//! `groundrl data check`: samples against their images (exist, decode, stated size, targets well formed
//! and inside the image in their frame). Prints each issue, then counts per problem and source, and
//! optionally writes preview PNGs with targets and instructions drawn. An image that cannot be read
//! is an issue of its sample and stops nothing. Exits 1 if there is any issue or failed preview.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use groundrl_core::data::check::{CheckReport, Problem, check, write_previews};

use super::{ImageArgs, read_samples, report_skipped};

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
    #[command(flatten)]
    images: ImageArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let loaded = read_samples(&args.input)?;
    report_skipped(&loaded.skipped, false)?;
    let base = args.input.parent().unwrap_or(Path::new("."));
    let limits = args.images.limits();
    let report = check(&loaded.samples, base, limits);
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
    print_hints(&report);
    let mut failed_previews = 0;
    if let Some(folder) = &args.previews {
        let previews = write_previews(&loaded.samples, base, folder, args.n_previews, limits)?;
        for failure in &previews.failed {
            eprintln!("preview skipped: {failure}");
        }
        failed_previews = previews.failed.len();
        println!(
            "wrote {} previews to {}, {failed_previews} failed",
            previews.written.len(),
            folder.display()
        );
    }
    let clean = report.issues.is_empty() && loaded.skipped.is_empty() && failed_previews == 0;
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// What to pass to read the images that were refused, if any were.
fn print_hints(report: &CheckReport) {
    let count = |wanted: Problem| report.issues.iter().filter(|i| i.problem == wanted).count();
    let refused = count(Problem::RefusedPath);
    if refused > 0 {
        println!(
            "note: {refused} image paths were refused; --allow-outside-paths reads those outside \
             the sample file's folder (never devices or files under /dev)"
        );
    }
    let large = count(Problem::ImageTooLarge);
    if large > 0 {
        println!("note: {large} images are over the decoding budget; raise it with --max-image-pixels");
    }
}
