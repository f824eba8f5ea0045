//! Checkpoints that survive a crash at any moment: `RUN_DIR/checkpoints/step-N/` holds
//! `weights.safetensors` (the model tensors the caller chose: trainable, full, or both),
//! `optimizer.safetensors` (e.g. [`crate::optim::AdamW::state`]) and `state.json` (the caller's
//! resumable state: RNG states, data position, counters). `RUN_DIR/checkpoints/latest` names the newest
//! complete one (`step-N`).
//!
//! Every checkpoint carries a manifest (`manifest.json`, written last: each file's length and checksum,
//! module `manifest`), and a checkpoint is read only after the files it needs match it: a damaged or
//! incomplete one is refused, naming the file. Weights or optimizer state holding NaN or infinity are
//! never saved: the save is refused, naming the tensor, and the checkpoints already saved stay.
//!
//! A save writes into `checkpoints/.tmp-step-N-<pid>/`, fsyncs every file and the folder, renames it to
//! `step-N`, fsyncs `checkpoints/`, and only then replaces `latest` (write a temporary file, fsync,
//! rename, fsync the folder). A crash therefore leaves either the previous `latest` with its complete
//! checkpoint, or the new one; a half-written temporary folder is never read, and the trainer removes
//! such leftovers when it starts again (`groundrl_core::atomic::remove_temporaries`). Older
//! checkpoints beyond `keep` are removed last.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use groundrl_core::atomic::{self, write_atomic};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tch::{Device, Kind, TchError, Tensor};

use crate::run_folder::{
    CHECKPOINTS_DIR, LATEST_FILE, OPTIMIZER_FILE, STATE_FILE, WEIGHTS_FILE, parse_step_name, step_name,
};
use crate::tensor_file::TensorFile;

mod manifest;

/// Why a checkpoint could not be written, read or restored.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{} is missing", path.display())]
    Missing { path: PathBuf },
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
    /// A file does not match the checkpoint's manifest: damaged, cut short or replaced.
    #[error("{} does not match the checkpoint's manifest ({message}): the checkpoint is damaged", path.display())]
    Unverified { path: PathBuf, message: String },
    /// A tensor to save holds NaN or infinity.
    #[error("tensor `{name}` holds NaN or infinity; a checkpoint is never saved with it")]
    NonFinite { name: String },
    #[error("{}: {source}", path.display())]
    Tensors { path: PathBuf, source: TchError },
    #[error("{}: {source}", path.display())]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{} is the checkpoint `latest` names; a run does not save the same step twice", path.display())]
    Exists { path: PathBuf },
    #[error("tensor `{name}` is not in the checkpoint")]
    MissingTensor { name: String },
    #[error("tensor `{name}` of the checkpoint has no counterpart to restore it into")]
    UnexpectedTensor { name: String },
    #[error("tensor `{name}`: the checkpoint has shape {found:?}, {expected:?} expected")]
    Shape {
        name: String,
        expected: Vec<i64>,
        found: Vec<i64>,
    },
    #[error("tensor `{name}`: the checkpoint has dtype {found:?}, {expected:?} expected")]
    Kind {
        name: String,
        expected: Kind,
        found: Kind,
    },
    #[error("tensor `{name}`: {source}")]
    Copy { name: String, source: TchError },
}

/// What a checkpoint holds, borrowed from the trainer for [`save_checkpoint`].
pub struct CheckpointParts<'a, T> {
    /// Model tensors by variable name (any device; written as they are, in their dtype).
    pub weights: &'a [(String, Tensor)],
    /// Optimizer state by name, e.g. [`crate::optim::AdamW::state`].
    pub optimizer: &'a [(String, Tensor)],
    /// Everything else needed to resume, written as JSON.
    pub state: &'a T,
}

/// A checkpoint read back by [`load_checkpoint`]; tensors are on the CPU, in their saved dtype. The
/// optimizer state is opened but not read: a rank of a sharded run reads only its share of it
/// ([`LoadedCheckpoint::read_optimizer`]).
#[derive(Debug)]
pub struct LoadedCheckpoint<T> {
    pub dir: PathBuf,
    pub step: u64,
    pub weights: Vec<(String, Tensor)>,
    pub optimizer: TensorFile,
    pub state: T,
}

impl<T> LoadedCheckpoint<T> {
    /// The optimizer state entries whose names `wanted` accepts.
    pub fn read_optimizer(
        &self,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<Vec<(String, Tensor)>, CheckpointError> {
        let path = self.dir.join(OPTIMIZER_FILE);
        self.optimizer
            .read_where(wanted)
            .map_err(|source| CheckpointError::Tensors { path, source })
    }
}

/// Saves the checkpoint of `step` atomically (see the module doc) and returns its folder.
///
/// `keep` (0: all) counts the new checkpoint: the `keep − 1` newest older ones stay, older ones are
/// removed. Checkpoints of later steps (left by a run that was resumed from an earlier step) are not
/// "older" and stay; a `step-N` folder of the same step that `latest` does not name is such a leftover
/// and is replaced.
pub fn save_checkpoint<T: Serialize>(
    run_dir: &Path,
    step: u64,
    parts: &CheckpointParts<'_, T>,
    keep: usize,
) -> Result<PathBuf, CheckpointError> {
    let root = run_dir.join(CHECKPOINTS_DIR);
    fs::create_dir_all(&root).map_err(io_error(&root))?;
    sync_dir(run_dir)?;
    let name = step_name(step);
    let dir = root.join(&name);
    if dir.exists() && read_latest(&root).ok() == Some(step) {
        return Err(CheckpointError::Exists { path: dir });
    }
    refuse_non_finite(parts.weights.iter().chain(parts.optimizer))?;
    let tmp = write_temporary(&root, &name, parts)?;
    if dir.exists() {
        fs::remove_dir_all(&dir).map_err(io_error(&dir))?;
    }
    fs::rename(&tmp, &dir).map_err(io_error(&dir))?;
    sync_dir(&root)?;
    write_latest(&root, &name)?;
    prune(&root, step, keep)?;
    Ok(dir)
}

/// Writes the checkpoint into `root/.tmp-NAME-<pid>/`, every file and the folder synced; on failure the
/// folder is removed.
fn write_temporary<T: Serialize>(
    root: &Path,
    name: &str,
    parts: &CheckpointParts<'_, T>,
) -> Result<PathBuf, CheckpointError> {
    let tmp = root.join(format!(".tmp-{name}-{}", std::process::id()));
    if tmp.exists() {
        // An earlier failed save of this process.
        fs::remove_dir_all(&tmp).map_err(io_error(&tmp))?;
    }
    fs::create_dir(&tmp).map_err(io_error(&tmp))?;
    let written = write_tensors(&tmp.join(WEIGHTS_FILE), parts.weights)
        .inspect(|()| crate::fault::point(crate::fault::SAVE))
        .and_then(|()| write_tensors(&tmp.join(OPTIMIZER_FILE), parts.optimizer))
        .and_then(|()| write_json(&tmp.join(STATE_FILE), parts.state))
        .and_then(|()| manifest::write(&tmp, &[WEIGHTS_FILE, OPTIMIZER_FILE, STATE_FILE]))
        .and_then(|()| sync_dir(&tmp));
    if let Err(err) = written {
        let _ = fs::remove_dir_all(&tmp);
        return Err(err);
    }
    Ok(tmp)
}

/// The folder of the checkpoint of `step` in `run_dir` (whether or not it exists).
pub fn checkpoint_dir(run_dir: &Path, step: u64) -> PathBuf {
    run_dir.join(CHECKPOINTS_DIR).join(step_name(step))
}

/// The folder of the newest complete checkpoint of a run, as `checkpoints/latest` names it.
pub fn latest_checkpoint(run_dir: &Path) -> Result<PathBuf, CheckpointError> {
    let root = run_dir.join(CHECKPOINTS_DIR);
    let dir = root.join(step_name(read_latest(&root)?));
    if !dir.is_dir() {
        return Err(CheckpointError::Invalid {
            path: root.join(LATEST_FILE),
            message: format!("names {}, which is not a folder", dir.display()),
        });
    }
    Ok(dir)
}

/// Whether the run has a complete checkpoint (`checkpoints/latest` exists); without one, a run
/// stopped early starts over.
pub fn has_checkpoint(run_dir: &Path) -> bool {
    run_dir.join(CHECKPOINTS_DIR).join(LATEST_FILE).is_file()
}

/// The steps of a run's checkpoints (its `checkpoints/step-N` entries), ascending; none when the run
/// has no `checkpoints/` folder. The step `latest` names is one of them; later ones may be left by a
/// run resumed from an earlier step.
pub fn checkpoint_steps(run_dir: &Path) -> Result<Vec<u64>, CheckpointError> {
    let root = run_dir.join(CHECKPOINTS_DIR);
    if !root.is_dir() {
        return Ok(Vec::new());
    }
    let mut steps = steps_in(&root)?;
    steps.sort_unstable();
    Ok(steps)
}

/// Loads the newest complete checkpoint of a run; leftover temporary folders are ignored.
pub fn load_latest<T: DeserializeOwned>(run_dir: &Path) -> Result<LoadedCheckpoint<T>, CheckpointError> {
    load_checkpoint(&latest_checkpoint(run_dir)?)
}

/// A checkpoint that [`load_resumable`] passed over, and why.
#[derive(Debug)]
pub struct PassedOver {
    /// Where the folder is now: renamed `damaged-step-N` in the checkpoints folder.
    pub dir: PathBuf,
    pub error: CheckpointError,
}

/// Loads the newest complete checkpoint of a run to resume from. With `fall_back`, when that one
/// does not load (a file damaged or missing), the newest older one that does is taken instead: it
/// becomes `latest`, and the newer ones it passed over are renamed `damaged-step-N` (kept for a look,
/// out of the way of the steps the run saves again); they are returned with their errors. Without
/// `fall_back`, or when none loads, the newest one's error is returned.
pub fn load_resumable<T: DeserializeOwned>(
    run_dir: &Path,
    fall_back: bool,
) -> Result<(LoadedCheckpoint<T>, Vec<PassedOver>), CheckpointError> {
    let latest = latest_checkpoint(run_dir)?;
    let newest_error = match load_checkpoint(&latest) {
        Ok(checkpoint) => return Ok((checkpoint, Vec::new())),
        Err(error) if fall_back => error,
        Err(error) => return Err(error),
    };
    let newest = folder_step(&latest)?;
    let older = checkpoint_steps(run_dir)?
        .into_iter()
        .filter(|&step| step < newest);
    let mut passed = vec![(newest, newest_error)];
    for step in older.rev() {
        match load_checkpoint(&checkpoint_dir(run_dir, step)) {
            Ok(checkpoint) => return Ok((checkpoint, set_aside(run_dir, step, passed)?)),
            Err(error) => passed.push((step, error)),
        }
    }
    Err(passed.swap_remove(0).1)
}

/// Names the checkpoint of `step` `latest` and renames the `passed` ones `damaged-step-N`.
fn set_aside(
    run_dir: &Path,
    step: u64,
    passed: Vec<(u64, CheckpointError)>,
) -> Result<Vec<PassedOver>, CheckpointError> {
    let root = run_dir.join(CHECKPOINTS_DIR);
    write_latest(&root, &step_name(step))?;
    let set = passed
        .into_iter()
        .map(|(step, error)| {
            let dir = root.join(format!("damaged-{}", step_name(step)));
            if dir.exists() {
                fs::remove_dir_all(&dir).map_err(io_error(&dir))?;
            }
            let from = root.join(step_name(step));
            fs::rename(&from, &dir).map_err(io_error(&from))?;
            Ok(PassedOver { dir, error })
        })
        .collect::<Result<_, CheckpointError>>()?;
    sync_dir(&root)?;
    Ok(set)
}

/// Loads the checkpoint folder `dir` (named `step-N`) once its files match its manifest.
pub fn load_checkpoint<T: DeserializeOwned>(dir: &Path) -> Result<LoadedCheckpoint<T>, CheckpointError> {
    let step = folder_step(dir)?;
    manifest::verify(dir, &[WEIGHTS_FILE, OPTIMIZER_FILE, STATE_FILE])?;
    let state_path = dir.join(STATE_FILE);
    let text = read(&state_path)?;
    let state = serde_json::from_slice(&text).map_err(|source| CheckpointError::Json {
        path: state_path,
        source,
    })?;
    Ok(LoadedCheckpoint {
        dir: dir.to_owned(),
        step,
        weights: read_tensors(&dir.join(WEIGHTS_FILE))?,
        optimizer: open_tensors(&dir.join(OPTIMIZER_FILE))?,
        state,
    })
}

/// The step and the model tensors of the checkpoint folder `dir` (named `step-N`), without its
/// optimizer state (twice the weights' size for AdamW) or its resumable state: what running or
/// exporting the trained model needs. Tensors are on the CPU, in their saved dtype.
pub fn load_weights(dir: &Path) -> Result<(u64, Vec<(String, Tensor)>), CheckpointError> {
    let step = folder_step(dir)?;
    manifest::verify(dir, &[WEIGHTS_FILE])?;
    Ok((step, read_tensors(&dir.join(WEIGHTS_FILE))?))
}

/// Copies the tensors `from` (e.g. a loaded checkpoint's weights) into the existing tensors `into` (e.g.
/// the model's variables) by name, without recording gradients.
///
/// The two sets of names must match exactly, with equal shapes and dtypes: a tensor left out or
/// converted would make a resumed run silently differ. Everything is checked before anything is copied.
pub fn restore_tensors(into: &[(String, Tensor)], from: &[(String, Tensor)]) -> Result<(), CheckpointError> {
    let sources: HashMap<&str, &Tensor> = from
        .iter()
        .map(|(name, tensor)| (name.as_str(), tensor))
        .collect();
    for (name, target) in into {
        let source = sources
            .get(name.as_str())
            .ok_or_else(|| CheckpointError::MissingTensor { name: name.clone() })?;
        if source.size() != target.size() {
            return Err(CheckpointError::Shape {
                name: name.clone(),
                expected: target.size(),
                found: source.size(),
            });
        }
        if source.kind() != target.kind() {
            return Err(CheckpointError::Kind {
                name: name.clone(),
                expected: target.kind(),
                found: source.kind(),
            });
        }
    }
    let targets: HashSet<&str> = into.iter().map(|(name, _)| name.as_str()).collect();
    if let Some((name, _)) = from.iter().find(|(name, _)| !targets.contains(name.as_str())) {
        return Err(CheckpointError::UnexpectedTensor { name: name.clone() });
    }
    tch::no_grad(|| {
        into.iter().try_for_each(|(name, target)| {
            target
                .shallow_clone()
                .f_copy_(sources[name.as_str()])
                .map_err(|source| CheckpointError::Copy {
                    name: name.clone(),
                    source,
                })
        })
    })
}

/// Refuses tensors of which a floating-point one holds NaN or infinity, naming the first.
fn refuse_non_finite<'a>(
    tensors: impl IntoIterator<Item = &'a (String, Tensor)>,
) -> Result<(), CheckpointError> {
    for (name, tensor) in tensors {
        let copy_error = |source| CheckpointError::Copy {
            name: name.clone(),
            source,
        };
        if tensor.is_floating_point() && !all_finite(tensor).map_err(copy_error)? {
            return Err(CheckpointError::NonFinite { name: name.clone() });
        }
    }
    Ok(())
}

fn all_finite(tensor: &Tensor) -> Result<bool, TchError> {
    Ok(tensor.f_isfinite()?.f_all()?.f_int64_value(&[])? != 0)
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), CheckpointError> {
    let json = serde_json::to_vec_pretty(value).map_err(|source| CheckpointError::Json {
        path: path.to_owned(),
        source,
    })?;
    write_synced(path, &json)
}

/// Writes `tensors` as one safetensors file, from host copies (the writer reads contiguous CPU memory).
fn write_tensors(path: &Path, tensors: &[(String, Tensor)]) -> Result<(), CheckpointError> {
    let tensor_error = |source| CheckpointError::Tensors {
        path: path.to_owned(),
        source,
    };
    let host = tensors
        .iter()
        .map(|(name, tensor)| {
            Ok((
                name.as_str(),
                tensor.f_detach()?.f_to_device(Device::Cpu)?.f_contiguous()?,
            ))
        })
        .collect::<Result<Vec<_>, TchError>>()
        .map_err(tensor_error)?;
    Tensor::write_safetensors(&host, path).map_err(tensor_error)?;
    File::open(path)
        .and_then(|file| file.sync_all())
        .map_err(io_error(path))
}

fn read_tensors(path: &Path) -> Result<Vec<(String, Tensor)>, CheckpointError> {
    open_tensors(path)?
        .read_all()
        .map_err(|source| CheckpointError::Tensors {
            path: path.to_owned(),
            source,
        })
}

fn open_tensors(path: &Path) -> Result<TensorFile, CheckpointError> {
    if !path.is_file() {
        return Err(CheckpointError::Missing {
            path: path.to_owned(),
        });
    }
    TensorFile::open(path).map_err(|source| CheckpointError::Tensors {
        path: path.to_owned(),
        source,
    })
}

/// Replaces `latest` with `name` so that a reader sees either the old or the new content, never a mix.
fn write_latest(root: &Path, name: &str) -> Result<(), CheckpointError> {
    let latest = root.join(LATEST_FILE);
    write_atomic(&latest, format!("{name}\n").as_bytes()).map_err(io_error(&latest))
}

/// The step `checkpoints/latest` names.
fn read_latest(root: &Path) -> Result<u64, CheckpointError> {
    let path = root.join(LATEST_FILE);
    let bytes = read(&path)?;
    let text = String::from_utf8_lossy(&bytes);
    parse_step_name(text.trim()).ok_or_else(|| CheckpointError::Invalid {
        path,
        message: format!("expected a checkpoint name like step-12, found {:?}", text.trim()),
    })
}

/// Removes the checkpoints older than `step` beyond the `keep − 1` newest of them.
fn prune(root: &Path, step: u64, keep: usize) -> Result<(), CheckpointError> {
    if keep == 0 {
        return Ok(());
    }
    let mut older: Vec<u64> = steps_in(root)?
        .into_iter()
        .filter(|&other| other < step)
        .collect();
    older.sort_unstable_by(|a, b| b.cmp(a));
    for old in older.into_iter().skip(keep - 1) {
        let dir = root.join(step_name(old));
        fs::remove_dir_all(&dir).map_err(io_error(&dir))?;
    }
    Ok(())
}

/// The step of a checkpoint folder, from its name.
fn folder_step(dir: &Path) -> Result<u64, CheckpointError> {
    dir.file_name()
        .and_then(|name| name.to_str())
        .and_then(parse_step_name)
        .ok_or_else(|| CheckpointError::Invalid {
            path: dir.to_owned(),
            message: "a checkpoint folder is named step-N".into(),
        })
}

/// The steps of the `step-N` entries of the checkpoints folder `root`, in no order.
fn steps_in(root: &Path) -> Result<Vec<u64>, CheckpointError> {
    Ok(fs::read_dir(root)
        .map_err(io_error(root))?
        .filter_map(|entry| entry.ok()?.file_name().to_str().and_then(parse_step_name))
        .collect())
}

fn read(path: &Path) -> Result<Vec<u8>, CheckpointError> {
    fs::read(path).map_err(read_error(path))
}

/// The error of reading `path`: [`CheckpointError::Missing`] when it is not there.
fn read_error(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| match source.kind() {
        std::io::ErrorKind::NotFound => CheckpointError::Missing {
            path: path.to_owned(),
        },
        _ => io_error(path)(source),
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    let mut file = File::create(path).map_err(io_error(path))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(io_error(path))
}

/// Makes the entries of `dir` (files created, renamed or removed in it) durable.
fn sync_dir(dir: &Path) -> Result<(), CheckpointError> {
    atomic::sync_dir(dir).map_err(io_error(dir))
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_owned(),
        source,
    }
}
