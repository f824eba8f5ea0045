//! A checkpoint's manifest (`manifest.json`, written last): each file's length and XXH3-128 checksum.
//! A checkpoint is read only after the files it needs match their lines, so a flipped bit, a file cut
//! short or swapped tensors are refused with the file named, instead of resuming from other weights.
//! XXH3 detects such damage, not tampering, and hashes faster than a disk reads.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};
use twox_hash::XxHash3_128;

use super::{CheckpointError, io_error, read, read_error, write_json};
use crate::run_folder::MANIFEST_FILE;

/// One file's line of the manifest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct FileSum {
    bytes: u64,
    /// The XXH3-128 checksum of the file's bytes, 32 hex digits.
    #[serde(with = "hex_u128")]
    xxh3_128: u128,
}

/// The manifest: a line per file, by name in the checkpoint's folder.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Manifest {
    files: BTreeMap<String, FileSum>,
}

/// Writes the manifest of `files` (names in `dir`, already written and synced) into `dir`, synced.
pub(super) fn write(dir: &Path, files: &[&str]) -> Result<(), CheckpointError> {
    let files = files
        .iter()
        .map(|name| Ok((name.to_string(), sum(&dir.join(name))?)))
        .collect::<Result<_, CheckpointError>>()?;
    write_json(&dir.join(MANIFEST_FILE), &Manifest { files })
}

/// Checks that each of `files` (names in `dir`) is in the manifest of `dir` and matches its line.
pub(super) fn verify(dir: &Path, files: &[&str]) -> Result<(), CheckpointError> {
    let path = dir.join(MANIFEST_FILE);
    let manifest: Manifest =
        serde_json::from_slice(&read(&path)?).map_err(|source| CheckpointError::Json {
            path: path.clone(),
            source,
        })?;
    for name in files {
        let file = dir.join(name);
        let Some(want) = manifest.files.get(*name) else {
            return Err(unverified(&file, "not in the checkpoint's manifest".into()));
        };
        let found = sum(&file)?;
        if found.bytes != want.bytes {
            let message = format!("{} bytes, the manifest says {}", found.bytes, want.bytes);
            return Err(unverified(&file, message));
        }
        if found.xxh3_128 != want.xxh3_128 {
            let message = format!(
                "checksum {:032x}, the manifest says {:032x}",
                found.xxh3_128, want.xxh3_128
            );
            return Err(unverified(&file, message));
        }
    }
    Ok(())
}

fn unverified(path: &Path, message: String) -> CheckpointError {
    CheckpointError::Unverified {
        path: path.to_owned(),
        message,
    }
}

/// The length and checksum of the file at `path`, read in 8 MiB pieces.
fn sum(path: &Path) -> Result<FileSum, CheckpointError> {
    let mut file = File::open(path).map_err(read_error(path))?;
    let mut hasher = XxHash3_128::new();
    let mut buffer = vec![0u8; 8 << 20];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buffer).map_err(io_error(path))?;
        if n == 0 {
            break;
        }
        hasher.write(&buffer[..n]);
        bytes += n as u64;
    }
    Ok(FileSum {
        bytes,
        xxh3_128: hasher.finish_128(),
    })
}

/// A `u128` as 32 hex digits in JSON (JSON numbers stop at 2^53).
mod hex_u128 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &u128, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format!("{value:032x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u128, D::Error> {
        let text = String::deserialize(deserializer)?;
        u128::from_str_radix(&text, 16).map_err(serde::de::Error::custom)
    }
}
