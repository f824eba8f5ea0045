//! `groundrl export`: one checkpoint of a training run as an HF model folder that transformers (and
//! groundrl) loads like a released Qwen2.5-VL checkpoint.
//!
//! The trained model is rebuilt as [`crate::load_model`] rebuilds it (the run's initial model with the
//! checkpoint's tensors), LoRA adapters are folded into their layers' weights
//! ([`groundrl_tensor::model::Model::merge_lora`]: an HF folder has no place for them, and
//! transformers would skip their tensors without a word), and the folder is written by
//! [`hf_folder::save`]: `config.json` and `model.safetensors` under the released checkpoints' tensor
//! names, in the run's dtype, with the initial model's tokenizer, chat template and other processor
//! files. `preprocessor_config.json` is written from the run's image processor, whose pixel budget
//! (`model.min_pixels`, `model.max_pixels`) is the one the model was trained with.
//!
//! The folder is written under a temporary name beside `out` (`.NAME.tmp-PID`, see
//! [`groundrl_core::atomic`]) and renamed to `out` once every file is written and synced: a stopped
//! export leaves no folder that looks complete.

use std::path::{Path, PathBuf};

use groundrl_core::atomic::{publish_dir, temporary_path};
use groundrl_tensor::hf_folder::{self, FolderError};
use groundrl_tensor::model_error::ModelError;
use groundrl_tensor::processor::{PREPROCESSOR_CONFIG_FILE, ProcessorError};
use tch::Device;

use crate::checkpoint::{CheckpointError, checkpoint_dir, checkpoint_steps};
use crate::load_model::{LoadError, LoadedModel, load_model};
use crate::run_folder::CONFIG_FILE;

/// Why a run could not be exported.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{}: not a training run folder (it holds no {CONFIG_FILE})", path.display())]
    NotARun { path: PathBuf },
    #[error("{}: the run has no checkpoint of step {step}; its checkpoints: {}", run_dir.display(), steps_text(.available))]
    NoStep {
        run_dir: PathBuf,
        step: u64,
        available: Vec<u64>,
    },
    #[error("{}: exists and is not empty; export writes a new folder (give another --out or remove it)", path.display())]
    OutNotEmpty { path: PathBuf },
    #[error("{}: name the folder to write (not `..` or `/`)", path.display())]
    OutName { path: PathBuf },
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Folder(#[from] FolderError),
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

fn steps_text(steps: &[u64]) -> String {
    match steps {
        [] => "none".into(),
        _ => steps.iter().map(u64::to_string).collect::<Vec<_>>().join(", "),
    }
}

/// What [`export`] wrote.
#[derive(Debug)]
pub struct Exported {
    /// The checkpoint's step.
    pub step: u64,
    /// The checkpoint folder read.
    pub checkpoint: PathBuf,
    /// Layers whose LoRA adapters were merged into their weights (0 for a run without LoRA).
    pub merged_layers: usize,
}

/// Writes the checkpoint of `step` of the run in `run_dir` (by default the one `checkpoints/latest`
/// names) as an HF folder `out` (see the module doc). `out` may exist if it is empty; its parent
/// folders are created.
pub fn export(run_dir: &Path, step: Option<u64>, out: &Path) -> Result<Exported, ExportError> {
    if !run_dir.join(CONFIG_FILE).is_file() {
        return Err(ExportError::NotARun {
            path: run_dir.to_path_buf(),
        });
    }
    let out = &named_folder(out)?;
    check_out(out)?;
    let source = match step {
        Some(step) => existing_checkpoint(run_dir, step)?,
        None => run_dir.to_path_buf(),
    };
    // On the CPU in the run's dtype: the weights are written as trained, whatever device trained them.
    let mut loaded = load_model(&source, Device::Cpu, None)?;
    let run = loaded.run.take().ok_or_else(|| ExportError::NotARun {
        path: run_dir.to_path_buf(),
    })?;
    let merged_layers = loaded.hf.model.merge_lora()?;
    write_folder(&loaded, run.config.rollout.max_new_tokens as usize, out)?;
    Ok(Exported {
        step: run.step,
        checkpoint: run.dir,
        merged_layers,
    })
}

/// `RUN_DIR/checkpoints/step-N`, or an error listing the steps the run has.
fn existing_checkpoint(run_dir: &Path, step: u64) -> Result<PathBuf, ExportError> {
    let dir = checkpoint_dir(run_dir, step);
    if dir.is_dir() {
        return Ok(dir);
    }
    Err(ExportError::NoStep {
        run_dir: run_dir.to_path_buf(),
        step,
        available: checkpoint_steps(run_dir)?,
    })
}

/// `out` as an absolute path ending in a name (`.` components dropped), so that its temporary
/// sibling is beside it and not inside it.
fn named_folder(out: &Path) -> Result<PathBuf, ExportError> {
    let absolute = std::path::absolute(out).map_err(|source| ExportError::Io {
        path: out.to_path_buf(),
        source,
    })?;
    match absolute.file_name() {
        Some(_) => Ok(absolute),
        None => Err(ExportError::OutName {
            path: out.to_path_buf(),
        }),
    }
}

/// Refuses an `out` that holds anything: an export never mixes its files with others.
fn check_out(out: &Path) -> Result<(), ExportError> {
    let io = |source| ExportError::Io {
        path: out.to_path_buf(),
        source,
    };
    let occupied = match std::fs::read_dir(out) {
        Ok(mut entries) => entries.next().is_some(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        // A file, or a folder that cannot be read.
        Err(_) if out.exists() => true,
        Err(e) => return Err(io(e)),
    };
    match occupied {
        true => Err(ExportError::OutNotEmpty {
            path: out.to_path_buf(),
        }),
        false => Ok(()),
    }
}

/// Writes the folder into its temporary sibling and renames it to `out`; on failure the temporary
/// folder is removed. `max_new_tokens`: the run's token limit, for the generation config.
fn write_folder(loaded: &LoadedModel, max_new_tokens: usize, out: &Path) -> Result<(), ExportError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ExportError::Io { path, source }
    };
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
    }
    let tmp = temporary_path(out);
    if tmp.exists() {
        // Left by a killed export whose process had this one's id.
        std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
    }
    let written = hf_folder::save(loaded.hf.model.as_ref(), &loaded.base, &tmp)
        .map_err(ExportError::from)
        .and_then(|()| write_preprocessor_config(loaded, &tmp))
        .and_then(|()| write_generation_config(max_new_tokens, &tmp))
        .and_then(|()| publish_dir(&tmp, out).map_err(io(out)));
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    written
}

/// The run's token limit (`rollout.max_new_tokens`, what its held-out answers were allowed) as the
/// folder's generation default, over the initial model's generation config (its other keys kept):
/// `groundrl predict` and `eval model` on the folder, and transformers' `generate`, stop there.
fn write_generation_config(max_new_tokens: usize, dir: &Path) -> Result<(), ExportError> {
    let path = dir.join(hf_folder::GENERATION_CONFIG_FILE);
    let io = |source| ExportError::Io {
        path: path.clone(),
        source,
    };
    let mut config = match std::fs::read_to_string(&path) {
        Ok(text) => match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => {
                return Err(ExportError::from(FolderError::Inconsistent {
                    dir: path.display().to_string(),
                    problem: "the initial model's generation config is not a JSON object".into(),
                }));
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => serde_json::Map::new(),
        Err(e) => return Err(io(e)),
    };
    config.insert("max_new_tokens".into(), max_new_tokens.into());
    let text = serde_json::to_string_pretty(&config).map_err(|e| io(std::io::Error::other(e)))?;
    std::fs::write(&path, text + "\n").map_err(io)
}

/// The run's image processor as transformers saves it, over the initial model's copy.
fn write_preprocessor_config(loaded: &LoadedModel, dir: &Path) -> Result<(), ExportError> {
    let json = loaded
        .hf
        .processor
        .image
        .to_json()
        .map_err(|e| FolderError::from(ProcessorError::from(e)))?;
    let path = dir.join(PREPROCESSOR_CONFIG_FILE);
    std::fs::write(&path, json).map_err(|source| ExportError::Io { path, source })
}
