//! The step log: one JSON object per line, written through at once so that a crash loses at most the
//! line being written, and appended to when a resumed run opens it again.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::TelemetryError;
use crate::atomic::open_no_follow;

/// An append-only JSONL file.
#[derive(Debug)]
pub struct JsonlLog {
    file: File,
    path: PathBuf,
}

impl JsonlLog {
    /// Opens `path` for appending, creating it if needed. A file whose last line was cut short (a crash
    /// mid-write) gets a newline first, so the next record starts a line of its own.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TelemetryError> {
        let path = path.as_ref().to_path_buf();
        let io = |e| TelemetryError::io(&path, e);
        let mut options = OpenOptions::new();
        options.read(true).append(true).create(true);
        let mut file = open_no_follow(&options, &path).map_err(io)?;
        if ends_mid_line(&mut file).map_err(io)? {
            file.write_all(b"\n").map_err(io)?;
        }
        Ok(Self { file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `record` as one line, in one write.
    pub fn append(&mut self, record: &impl Serialize) -> Result<(), TelemetryError> {
        let mut line = serde_json::to_vec(record).map_err(|source| TelemetryError::Json {
            path: self.path.display().to_string(),
            source,
        })?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .and_then(|()| self.file.flush())
            .map_err(|e| TelemetryError::io(&self.path, e))
    }
}

/// Whether a non-empty file does not end with a newline.
fn ends_mid_line(file: &mut File) -> std::io::Result<bool> {
    if file.metadata()?.len() == 0 {
        return Ok(false);
    }
    file.seek(SeekFrom::End(-1))?;
    let mut last = [0u8];
    file.read_exact(&mut last)?;
    Ok(last[0] != b'\n')
}
