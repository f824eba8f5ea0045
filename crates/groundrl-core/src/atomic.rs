//! Files that a crash leaves either whole and old or whole and new, never cut short.
//!
//! [`write_atomic`] writes a temporary sibling, fsyncs it, renames it over the target and fsyncs the
//! folder; a reader (a resumed run, say) therefore never sees a half-written file. A process killed
//! between the write and the rename leaves its temporary behind: every temporary's name begins with
//! a dot and holds `.tmp-` (`.NAME.tmp-PID`, a checkpoint's `.tmp-step-N-PID/`), and
//! [`remove_temporaries`] clears them when the owner of the folder starts again.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// What every temporary name holds (`.NAME.tmp-PID`, `.tmp-step-N-PID`).
const MARK: &str = ".tmp-";

/// The temporary sibling of `path` this process writes before renaming it over `path`:
/// `.NAME.tmp-PID` in the same folder (a rename stays within one file system).
pub fn temporary_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    path.with_file_name(format!(".{name}{MARK}{}", std::process::id()))
}

/// Whether a file or folder name is one of a temporary (see the module doc).
pub fn is_temporary(name: &str) -> bool {
    name.starts_with('.') && name.contains(MARK)
}

/// Replaces `path` with `bytes` atomically: temporary, fsync, rename, fsync of the folder. The
/// temporary is opened without following a link, and the rename replaces a link at `path` rather than
/// writing through it.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = temporary_path(path);
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    open_no_follow(&options, &tmp)
        .and_then(|mut file| file.write_all(bytes))
        .and_then(|()| publish_file(&tmp, path))
}

/// Opens `path` with `options` without following a symbolic link there: a link (one planted to make a
/// write land outside the folder, say) is an error that says so, never a file written through.
pub fn open_no_follow(options: &OpenOptions, path: &Path) -> std::io::Result<File> {
    let mut options = options.clone();
    options.custom_flags(libc::O_NOFOLLOW);
    options.open(path).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => std::io::Error::new(
            e.kind(),
            "a symbolic link: nothing is written or truncated through a link",
        ),
        _ => e,
    })
}

/// Makes the complete file `tmp` (written by a writer of its own, at [`temporary_path`]) the file
/// `path`: fsync, rename, fsync of the folder. On failure `tmp` is removed.
pub fn publish_file(tmp: &Path, path: &Path) -> std::io::Result<()> {
    let published = File::open(tmp)
        .and_then(|file| file.sync_all())
        .and_then(|()| fs::rename(tmp, path));
    if published.is_err() {
        let _ = fs::remove_file(tmp);
    }
    published?;
    sync_dir(parent(path))
}

/// Renames the complete folder `tmp` to `dir` (after fsyncing every file in it and the folder) and
/// fsyncs the parent, so `dir` exists only with all its files.
pub fn publish_dir(tmp: &Path, dir: &Path) -> std::io::Result<()> {
    for entry in fs::read_dir(tmp)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            File::open(entry.path())?.sync_all()?;
        }
    }
    sync_dir(tmp)?;
    fs::rename(tmp, dir)?;
    sync_dir(parent(dir))
}

/// Makes the entries of `dir` (files created, renamed or removed in it) durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Removes every temporary file or folder under `dir` (recursively; a missing `dir` has none) and
/// returns their paths. Only for a folder no other process is writing: its temporaries are then
/// leftovers of a process that died mid-write.
pub fn remove_temporaries(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(removed),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        let is_dir = entry.file_type()?.is_dir();
        if is_temporary(&entry.file_name().to_string_lossy()) {
            if is_dir {
                fs::remove_dir_all(&path)?;
            } else {
                fs::remove_file(&path)?;
            }
            removed.push(path);
        } else if is_dir {
            removed.extend(remove_temporaries(&path)?);
        }
    }
    Ok(removed)
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_replaces_the_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        fs::write(&path, "old").unwrap();
        write_atomic(&path, b"new").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new");
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["config.toml"]);
        let tmp = temporary_path(&path);
        assert_eq!(
            tmp.file_name().unwrap().to_string_lossy(),
            format!(".config.toml.tmp-{}", std::process::id())
        );
    }

    #[test]
    fn leftover_temporaries_are_found_at_any_depth_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("checkpoints/.tmp-step-3-999/inner")).unwrap();
        fs::create_dir_all(root.join("checkpoints/step-2")).unwrap();
        fs::create_dir_all(root.join(".initial-model.tmp-77")).unwrap();
        for file in [
            "metrics.jsonl",
            ".metrics.jsonl.tmp-12",
            ".hidden",
            "checkpoints/.latest.tmp-5",
            "checkpoints/step-2/state.json",
            "checkpoints/.tmp-step-3-999/inner/weights.safetensors",
        ] {
            fs::write(root.join(file), "x").unwrap();
        }
        let mut removed: Vec<String> = remove_temporaries(root)
            .unwrap()
            .iter()
            .map(|p| p.strip_prefix(root).unwrap().display().to_string())
            .collect();
        removed.sort();
        assert_eq!(
            removed,
            [
                ".initial-model.tmp-77",
                ".metrics.jsonl.tmp-12",
                "checkpoints/.latest.tmp-5",
                "checkpoints/.tmp-step-3-999"
            ]
        );
        assert!(root.join(".hidden").exists() && root.join("checkpoints/step-2/state.json").exists());
        assert!(remove_temporaries(root).unwrap().is_empty());
        assert!(remove_temporaries(&root.join("absent")).unwrap().is_empty());
    }
}
