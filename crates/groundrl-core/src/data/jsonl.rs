//! Samples as JSON Lines: one [`Sample`] per line, the project's native format.
//!
//! Reading checks each line on its own: a line that is not a valid sample becomes a [`RecordError`](groundrl_score::data::RecordError)
//! (`file: line N: field: problem`) and the rest of the file is still read. Blank lines are allowed.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;

use groundrl_score::data::Sample;
use groundrl_score::data::error::{DataError, FieldError, Loaded, from_json_str};

/// Reads every line of `path`; bad lines are skipped and listed in [`Loaded::skipped`].
pub fn read_jsonl(path: &Path) -> Result<Loaded, DataError> {
    let file = File::open(path).map_err(|e| DataError::io(path, e))?;
    let mut loaded = Loaded::default();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| DataError::io(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        loaded.push(parse_line(&line).map_err(|e| e.at(path, format!("line {}", i + 1))));
    }
    Ok(loaded)
}

/// Parses and validates one line.
fn parse_line(line: &str) -> Result<Sample, FieldError> {
    let sample: Sample = from_json_str(line)?;
    sample.validate()?;
    Ok(sample)
}

/// Writes one sample per line (compact JSON, `\n` endings), replacing `path`.
pub fn write_jsonl(path: &Path, samples: &[Sample]) -> Result<(), DataError> {
    let io = |e| DataError::io(path, e);
    let mut out = BufWriter::new(File::create(path).map_err(io)?);
    for sample in samples {
        serde_json::to_writer(&mut out, sample).map_err(|e| DataError::io(path, e.into()))?;
        out.write_all(b"\n").map_err(io)?;
    }
    out.flush().map_err(io)
}
