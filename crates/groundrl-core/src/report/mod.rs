//! The HTML report of a run folder: one self-contained page (inline CSS and SVG charts, screenshots
//! as data URIs) that opens offline in any browser.
//!
//! It reads what a run leaves in its folder:
//! - `metrics.jsonl`: the trainer's [`StepRecord`](crate::telemetry::StepRecord) per step, drawn as
//!   curves named by their TensorBoard tags ([`StepRecord::scalars`](crate::telemetry::StepRecord::scalars));
//! - `eval/<label>.jsonl`: [`EvalRecord`](crate::telemetry::EvalRecord)s of held-out evaluations
//!   (`before`, `after`, ...), for the headline accuracy, accuracy per source, calibration and sample
//!   screenshots with the answer drawn over the targets; and, when the model called tools, its tool
//!   use with held-out accuracy with and without tools by target size;
//! - `rounds/**/*.svg`: the curriculum's figures (transition matrices), shown as they are;
//! - `config.toml`: the resolved config, shown verbatim.
//!
//! A missing piece (no evaluation yet, a run still at its first step, an image that cannot be read)
//! becomes a note in the page, so a report can be made of a run in progress; a malformed line of
//! `metrics.jsonl` or of an evaluation file is an error naming the file and line.
//!
//! ```no_run
//! use std::path::Path;
//! let run = Path::new("runs/demo");
//! groundrl_core::report::write_report(run, &run.join("report.html"), None).unwrap();
//! ```

mod page;
mod run;
mod samples;
mod sections;
#[cfg(test)]
mod tests;
mod tools;

use std::path::Path;

pub use page::render;
pub use run::{CONFIG_FILE, EVAL_DIR, EvalSet, Figure, METRICS_FILE, ROUNDS_DIR, ReportError, Run, read_log};
pub use samples::SampleView;

/// The folder of the dataset the run evaluated on (`data.test` in its `config.toml`), if that
/// folder is there.
fn evaluated_folder(run_dir: &Path) -> Option<std::path::PathBuf> {
    let text = std::fs::read_to_string(run_dir.join(CONFIG_FILE)).ok()?;
    let config: toml::Table = text.parse().ok()?;
    let test = Path::new(config.get("data")?.get("test")?.as_str()?);
    let folder = test.parent()?;
    folder.is_dir().then(|| folder.to_path_buf())
}

/// Reads the run in `run_dir` and writes its report to `out`. The evaluation records' screenshots
/// are read inside `images`, by default the folder of the evaluated dataset that the run's
/// `config.toml` names (`data.test`), else `run_dir`; a record naming a file elsewhere gets a note,
/// not the file ([`crate::data::confine`]). Returns the run as read, whose `notes` say what was
/// missing.
pub fn write_report(run_dir: &Path, out: &Path, images: Option<&Path>) -> Result<Run, ReportError> {
    let folder = images
        .map(Path::to_path_buf)
        .or_else(|| evaluated_folder(run_dir))
        .unwrap_or_else(|| run_dir.to_path_buf());
    let run = Run::load(run_dir, &folder)?;
    std::fs::write(out, render(&run)).map_err(|e| ReportError::io(out, e))?;
    Ok(run)
}
