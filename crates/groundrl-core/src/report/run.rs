//! Reading a run folder into a [`Run`]: the step log, the evaluations, the config, the curriculum's
//! figures and the sample screenshots, with a note for each piece that is missing; and
//! [`ReportError`], why a run could not be read or its report written.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use super::samples::{self, SampleView};
use crate::telemetry::{EvalRecord, StepRecord};
use groundrl_score::data::RecordError;
use groundrl_score::data::error::from_json_str;
use groundrl_score::metrics::gain::{Interval, paired_gain};

/// The step log the trainer appends to (the trainer's `METRICS_FILE`).
pub const METRICS_FILE: &str = "metrics.jsonl";
/// The resolved config the trainer writes when a run starts (the trainer's `CONFIG_FILE`).
pub const CONFIG_FILE: &str = "config.toml";
/// The folder of held-out evaluations, one `<label>.jsonl` of [`EvalRecord`]s each.
pub const EVAL_DIR: &str = "eval";
/// The folder the curriculum writes its per-round figures to.
pub const ROUNDS_DIR: &str = "rounds";

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The cause is part of the message rather than a `source()`, so that printing the error chain
    /// does not say it twice.
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
    /// A line of `metrics.jsonl` or of an evaluation file is not a record: `file: line N: field: problem`.
    #[error(transparent)]
    Record(#[from] RecordError),
}

impl ReportError {
    pub(super) fn io(path: &Path, error: std::io::Error) -> Self {
        Self::Io {
            path: path.display().to_string(),
            error,
        }
    }
}

/// The records of one evaluation file.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalSet {
    /// The file's stem: `before`, `after`, ...
    pub label: String,
    pub records: Vec<EvalRecord>,
}

impl EvalSet {
    /// Right answers and answers, over the records that pass `keep`.
    pub fn correct_of(&self, keep: impl Fn(&EvalRecord) -> bool) -> (usize, usize) {
        self.records
            .iter()
            .filter(|r| keep(r))
            .fold((0, 0), |(right, n), r| (right + usize::from(r.correct), n + 1))
    }

    /// The accuracy gain from `earlier` to this evaluation over the samples both answered (paired
    /// by id), with its 95% interval ([`paired_gain`]). `None` when they share no sample.
    pub fn gain_over(&self, earlier: &EvalSet) -> Option<Interval> {
        let before: HashMap<&str, bool> = earlier
            .records
            .iter()
            .map(|r| (r.id.as_str(), r.correct))
            .collect();
        let (was, is): (Vec<bool>, Vec<bool>) = self
            .records
            .iter()
            .filter_map(|r| before.get(r.id.as_str()).map(|&b| (b, r.correct)))
            .unzip();
        paired_gain(&was, &is)
    }
}

/// An SVG file found under `rounds/`.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// The path relative to the run folder, with `/` separators.
    pub path: String,
    pub svg: String,
}

/// Everything the report shows about a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub dir: PathBuf,
    pub steps: Vec<StepRecord>,
    /// Evaluations in report order: `before` first, `after` last, the curve points and other labels
    /// between (`report_order`).
    pub evals: Vec<EvalSet>,
    pub config: Option<String>,
    /// The curriculum's figures, by path.
    pub rounds: Vec<Figure>,
    /// Up to eight answers of the last evaluation, right and wrong mixed.
    pub samples: Vec<SampleView>,
    /// What was missing or skipped, in the order found.
    pub notes: Vec<String>,
}

impl Run {
    /// Reads the run in `dir`; relative image paths of the evaluation records are read from `images`.
    pub fn load(dir: &Path, images: &Path) -> Result<Self, ReportError> {
        if !dir.is_dir() {
            let error = match dir.exists() {
                true => std::io::Error::new(
                    ErrorKind::NotADirectory,
                    "a file, not a folder: give the run's folder (its trainer.run_dir)",
                ),
                false => std::io::Error::new(ErrorKind::NotFound, "no such folder"),
            };
            return Err(ReportError::io(dir, error));
        }
        let mut notes = Vec::new();
        let steps = read_records(&dir.join(METRICS_FILE), &mut notes)?.unwrap_or_else(|| {
            notes.push(format!(
                "no {METRICS_FILE}: the run has not logged a training step"
            ));
            Vec::new()
        });
        let evals = read_evals(&dir.join(EVAL_DIR), &mut notes)?;
        let config = read_optional(&dir.join(CONFIG_FILE))?;
        if config.is_none() {
            notes.push(format!("no {CONFIG_FILE} in the run folder"));
        }
        let rounds = read_figures(dir, &mut notes)?;
        let samples = evals
            .last()
            .map_or_else(Vec::new, |set| samples::load(&set.records, images));
        Ok(Self {
            dir: dir.to_path_buf(),
            steps,
            evals,
            config,
            rounds,
            samples,
            notes,
        })
    }
}

/// The text of `path`, `None` if it does not exist.
fn read_optional(path: &Path) -> Result<Option<String>, ReportError> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ReportError::io(path, e)),
    }
}

/// The records of a run's JSONL log (a warm-up's `sft.jsonl`, say), as the report reads its own: a
/// last line still being written is left out, any other bad line is an error naming the file and the
/// line; a missing file is an error too.
pub fn read_log<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>, ReportError> {
    let missing = || ReportError::io(path, std::io::Error::new(ErrorKind::NotFound, "no such file"));
    read_records(path, &mut Vec::new())?.ok_or_else(missing)
}

/// The records of a JSONL file, `None` if it does not exist. A last line without its newline that
/// does not parse is a record being written by a live run: it is skipped with a note. Any other bad
/// line is an error naming the file and the line.
fn read_records<T: DeserializeOwned>(
    path: &Path,
    notes: &mut Vec<String>,
) -> Result<Option<Vec<T>>, ReportError> {
    let Some(text) = read_optional(path)? else {
        return Ok(None);
    };
    let lines: Vec<&str> = text.lines().collect();
    let mut records = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match from_json_str(line) {
            Ok(record) => records.push(record),
            Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => notes.push(format!(
                "{}: line {} is incomplete (still being written?) and was left out",
                path.display(),
                i + 1
            )),
            Err(e) => return Err(e.at(path, format!("line {}", i + 1)).into()),
        }
    }
    Ok(Some(records))
}

impl EvalSet {
    /// The evaluations of one held-out set's folder (`eval/`, or `eval/<name>/` for a set of
    /// `data.held_out`), in report order (`before` first, `after` last); with what was missing or
    /// skipped.
    pub fn read_folder(dir: &Path) -> Result<(Vec<EvalSet>, Vec<String>), ReportError> {
        let mut notes = Vec::new();
        let sets = read_evals(dir, &mut notes)?;
        Ok((sets, notes))
    }
}

/// Every `*.jsonl` of the eval folder, in report order.
fn read_evals(dir: &Path, notes: &mut Vec<String>) -> Result<Vec<EvalSet>, ReportError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            notes.push(format!(
                "no {EVAL_DIR}/ folder: no held-out evaluation was written (the demo writes \
                 {EVAL_DIR}/before.jsonl and {EVAL_DIR}/after.jsonl)"
            ));
            return Ok(Vec::new());
        }
        Err(e) => return Err(ReportError::io(dir, e)),
    };
    let mut sets = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| ReportError::io(dir, e))?.path();
        let label = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        let (Some(label), Some("jsonl")) = (label, path.extension().and_then(|e| e.to_str())) else {
            continue;
        };
        let records = read_records(&path, notes)?.unwrap_or_default();
        if records.is_empty() {
            notes.push(format!("{}: no records", path.display()));
        }
        sets.push(EvalSet { label, records });
    }
    if sets.is_empty() {
        notes.push(format!("{}: no .jsonl evaluation file", dir.display()));
    }
    sets.sort_by(|a, b| report_order(&a.label, &b.label));
    Ok(sets)
}

/// `before` first, `after` last, between them the warm-up's curve points, then GRPO's (their steps
/// zero-padded, so in step order), then other labels, each group alphabetically.
fn report_order(a: &str, b: &str) -> Ordering {
    let rank = |label: &str| match label {
        "before" => 0,
        "after" => 4,
        _ if label.starts_with("sft-step-") => 1,
        _ if label.starts_with("grpo-step-") => 2,
        _ => 3,
    };
    rank(a).cmp(&rank(b)).then_with(|| a.cmp(b))
}

/// Every `*.svg` under `rounds/`, sorted by path; an unreadable one is noted and left out.
fn read_figures(run_dir: &Path, notes: &mut Vec<String>) -> Result<Vec<Figure>, ReportError> {
    let mut paths = Vec::new();
    collect_svgs(&run_dir.join(ROUNDS_DIR), &mut paths)?;
    paths.sort();
    let mut figures = Vec::new();
    for path in paths {
        let relative = path.strip_prefix(run_dir).unwrap_or(&path);
        let relative: Vec<String> = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        match fs::read_to_string(&path) {
            Ok(svg) => figures.push(Figure {
                path: relative.join("/"),
                svg,
            }),
            Err(e) => notes.push(format!("{}: {e}", path.display())),
        }
    }
    Ok(figures)
}

/// The `.svg` files under `dir`, at any depth (none if `dir` does not exist).
fn collect_svgs(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), ReportError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(ReportError::io(dir, e)),
    };
    for entry in entries {
        let path = entry.map_err(|e| ReportError::io(dir, e))?.path();
        if path.is_dir() {
            collect_svgs(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "svg") {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_run_from_before_to_after() {
        let mut labels = vec!["after", "round-2", "before", "round-1"];
        labels.sort_by(|a, b| report_order(a, b));
        assert_eq!(labels, ["before", "round-1", "round-2", "after"]);
        let mut curve = vec![
            "after",
            "grpo-step-000010",
            "round-1",
            "sft-step-000100",
            "before",
            "grpo-step-000005",
            "sft-step-000050",
        ];
        curve.sort_by(|a, b| report_order(a, b));
        assert_eq!(
            curve,
            [
                "before",
                "sft-step-000050",
                "sft-step-000100",
                "grpo-step-000005",
                "grpo-step-000010",
                "round-1",
                "after"
            ]
        );
    }

    #[test]
    fn a_bad_line_names_the_file_and_line_but_a_partial_last_line_is_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.jsonl");
        let mut notes = Vec::new();
        fs::write(&path, "{\"a\":1}\n\n{\"a\":2}\n{\"a\":").unwrap();
        let read: Vec<serde_json::Value> = read_records(&path, &mut notes).unwrap().unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(notes.len(), 1);
        assert!(notes[0].ends_with("x.jsonl: line 4 is incomplete (still being written?) and was left out"));

        fs::write(&path, "{\"a\":1}\nnot json\n{\"a\":2}\n").unwrap();
        let err = read_records::<serde_json::Value>(&path, &mut notes).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("{}: line 2: record: expected", path.display())),
            "{text}"
        );
        assert_eq!(
            read_records::<serde_json::Value>(&dir.path().join("none"), &mut notes).unwrap(),
            None
        );
    }
}
