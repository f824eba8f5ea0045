//! One writer per run folder: `RUN_DIR/.lock`, locked (`File::try_lock`, `flock` on Linux) by the process that trains the run
//! (rank 0 of a data-parallel run) for as long as it does, and holding that process's id and host.
//! A second `train` or `--resume` on the folder is refused before it touches anything, naming the
//! holder. The kernel releases the lock when its process ends, however it ends; a holder that ended
//! without clearing the file (killed, say) is found out by the next taker, which takes the lock over
//! and says so. `flock` is reliable on a local file system; on a network one (NFS) it may not be.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::atomic::open_no_follow;

/// The lock file's name in the run folder.
pub const LOCK_FILE: &str = ".lock";

/// Why the run folder's lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "{} is in use: another process trains this run ({holder}); wait for it to end, or stop it",
        run_dir.display()
    )]
    Held { run_dir: PathBuf, holder: String },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

/// The lock of a run folder, held until dropped.
#[derive(Debug)]
pub struct RunLock {
    file: File,
    /// What the file held when the lock was taken: a holder that ended without releasing it.
    pub stale: Option<String>,
}

impl RunLock {
    /// Takes the lock of `run_dir` (an existing folder) for this process, without waiting: refused
    /// when another process holds it. The lock file is opened without following a link.
    pub fn take(run_dir: &Path) -> Result<Self, LockError> {
        let path = run_dir.join(LOCK_FILE);
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(true).truncate(false);
        let mut file = open_no_follow(&options, &path).map_err(io)?;
        let locked = file.try_lock();
        let mut held = String::new();
        file.read_to_string(&mut held).map_err(io)?;
        let held = held.trim().to_string();
        match locked {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let holder = match held.is_empty() {
                    true => "a process that is starting or ending".into(),
                    false => held,
                };
                return Err(LockError::Held {
                    run_dir: run_dir.to_owned(),
                    holder,
                });
            }
            Err(TryLockError::Error(err)) => return Err(io(err)),
        }
        let host = gethostname::gethostname().to_string_lossy().into_owned();
        let me = format!("pid {} on {host}", std::process::id());
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)).map(|_| ()))
            .and_then(|()| file.write_all(format!("{me}\n").as_bytes()))
            .and_then(|()| file.sync_all())
            .map_err(io)?;
        Ok(Self {
            file,
            stale: (!held.is_empty()).then_some(held),
        })
    }
}

impl Drop for RunLock {
    /// Clears the holder before the lock goes with the file's descriptor: an empty file is a lock
    /// released in order.
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_taker_is_refused_and_a_stale_holder_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let first = RunLock::take(dir.path()).unwrap();
        assert_eq!(first.stale, None);
        let holder = format!("pid {} on ", std::process::id());
        let held = std::fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap();
        assert!(held.starts_with(&holder), "{held}");
        // Another open file description of the same file: what a second process would have.
        let err = RunLock::take(dir.path()).unwrap_err().to_string();
        assert!(err.contains("is in use") && err.contains(&holder), "{err}");
        drop(first);
        assert_eq!(std::fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap(), "");
        let again = RunLock::take(dir.path()).unwrap();
        assert_eq!(again.stale, None);
        drop(again);

        // A holder killed without clearing the file.
        std::fs::write(dir.path().join(LOCK_FILE), "pid 4242 on elsewhere\n").unwrap();
        let taken = RunLock::take(dir.path()).unwrap();
        assert_eq!(taken.stale.as_deref(), Some("pid 4242 on elsewhere"));
    }

    #[test]
    fn a_lock_file_that_is_a_link_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "keep me").unwrap();
        let run = dir.path().join("run");
        std::fs::create_dir(&run).unwrap();
        std::os::unix::fs::symlink(&outside, run.join(LOCK_FILE)).unwrap();
        let err = RunLock::take(&run).unwrap_err().to_string();
        assert!(err.contains(".lock"), "{err}");
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep me");
    }
}
