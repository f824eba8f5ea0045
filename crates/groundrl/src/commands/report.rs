//! `groundrl report RUN_DIR`: the run's HTML report (curves, held-out accuracy, calibration, sample
//! answers, config) in one file that opens offline.

use std::path::PathBuf;
use std::process::ExitCode;

use groundrl_core::report::write_report;

#[derive(clap::Args)]
pub struct Args {
    /// The run folder (trainer.run_dir).
    run_dir: PathBuf,
    /// Where to write the page. Default: RUN_DIR/report.html.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Folder the evaluation records' relative image paths start from (the evaluated dataset's
    /// folder). Default: RUN_DIR.
    #[arg(long)]
    images: Option<PathBuf>,
}

/// Writes the report and prints its path; what was missing from the run is printed as notes.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let out = args.out.unwrap_or_else(|| args.run_dir.join("report.html"));
    // The error names the file at fault.
    let run = write_report(&args.run_dir, &out, args.images.as_deref())?;
    for note in &run.notes {
        eprintln!("note: {note}");
    }
    let unshown = run.samples.iter().filter(|s| s.image.is_err()).count();
    if unshown > 0 {
        eprintln!("note: {unshown} sample screenshots could not be read (pass --images DIR?)");
    }
    println!("{}", out.display());
    Ok(ExitCode::SUCCESS)
}
