//! The model a command runs (`groundrl predict`, `groundrl eval model`, `groundrl export`): an HF
//! folder, or the weights a training run saved.
//!
//! A run's checkpoint (`RUN_DIR/checkpoints/step-N/weights.safetensors`) holds every variable of the
//! policy as the trainer held it: the full weights, and with LoRA (`model.lora_rank` above 0) the
//! adapters too, unmerged. So the trained model is rebuilt the way the trainer built it (the run's
//! initial model, `RUN_DIR/initial-model/` for a preset or `model.path`, with the same adapters
//! attached) and the checkpoint's tensors are copied into it by name, every name and shape checked
//! ([`crate::checkpoint::restore_tensors`]). The processor takes the run's pixel budget
//! (`model.min_pixels`, `model.max_pixels`), as in training, so a prompt has the image tokens it had
//! there.
//!
//! ```no_run
//! use std::path::Path;
//! use groundrl_train::load_model::load_model;
//! // A run folder (its latest checkpoint), one checkpoint, or an HF folder.
//! let loaded = load_model(Path::new("runs/pro"), tch::Device::Cpu, None)?;
//! println!("{}", loaded.describe());
//! # Ok::<(), groundrl_train::load_model::LoadError>(())
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use groundrl_score::frame::Frame;
use groundrl_tensor::family::{Family, FamilyError};
use groundrl_tensor::hf_folder::{self, FolderError, HfModel};
use groundrl_tensor::lora::LoraSpec;
use groundrl_tensor::model_error::ModelError;
use tch::{Device, Kind, Tensor};

use crate::checkpoint::{CheckpointError, has_checkpoint, latest_checkpoint, load_weights, restore_tensors};
use crate::config::{ModelConfig, TrainConfig};
use crate::run_folder::{CHECKPOINTS_DIR, CONFIG_FILE, INITIAL_MODEL_DIR, WEIGHTS_FILE};

/// The file that makes a folder an HF model folder.
const HF_CONFIG_FILE: &str = "config.json";

/// Why a model could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(
        "{}: not a model: expected an HF model folder (config.json), a training run folder \
         (config.toml) or one of its checkpoints (checkpoints/step-N)",
        path.display()
    )]
    NotAModel { path: PathBuf },
    #[error("{}: {problem}", path.display())]
    Run { path: PathBuf, problem: String },
    #[error(transparent)]
    Folder(#[from] FolderError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Family(#[from] FamilyError),
}

/// Where a model's weights are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelSource {
    /// An HF model folder.
    Folder(PathBuf),
    /// A checkpoint folder of a training run.
    Checkpoint { run_dir: PathBuf, dir: PathBuf },
}

impl ModelSource {
    /// What `path` is: an HF folder (it holds `config.json`), a run folder (it holds `config.toml`:
    /// its latest checkpoint) or a checkpoint folder (`RUN_DIR/checkpoints/step-N`).
    pub fn locate(path: &Path) -> Result<Self, LoadError> {
        if path.join(HF_CONFIG_FILE).is_file() {
            return Ok(Self::Folder(path.to_path_buf()));
        }
        if path.join(CONFIG_FILE).is_file() {
            if !has_checkpoint(path) {
                return Err(LoadError::Run {
                    path: path.to_path_buf(),
                    problem: format!(
                        "the run has no checkpoint yet (checkpoints/latest is missing); its initial \
                         model, when it started from a preset, is {}",
                        path.join(INITIAL_MODEL_DIR).display()
                    ),
                });
            }
            return Ok(Self::Checkpoint {
                run_dir: path.to_path_buf(),
                dir: latest_checkpoint(path)?,
            });
        }
        let parent = path
            .parent()
            .filter(|p| p.file_name() == Some(CHECKPOINTS_DIR.as_ref()));
        if let Some(run_dir) = parent.and_then(Path::parent)
            && path.join(WEIGHTS_FILE).is_file()
        {
            if !run_dir.join(CONFIG_FILE).is_file() {
                return Err(LoadError::Run {
                    path: run_dir.to_path_buf(),
                    problem: format!(
                        "holds no {CONFIG_FILE}: the checkpoint's weights cannot be placed without the \
                         run's model settings"
                    ),
                });
            }
            return Ok(Self::Checkpoint {
                run_dir: run_dir.to_path_buf(),
                dir: path.to_path_buf(),
            });
        }
        Err(LoadError::NotAModel {
            path: path.to_path_buf(),
        })
    }
}

/// The run a model's weights come from.
#[derive(Debug)]
pub struct RunCheckpoint {
    pub run_dir: PathBuf,
    /// The checkpoint folder (`RUN_DIR/checkpoints/step-N`).
    pub dir: PathBuf,
    pub step: u64,
    /// The run's resolved config (`RUN_DIR/config.toml`): prompts, tools, reward spec and
    /// generation settings of the training.
    pub config: TrainConfig,
}

/// A model ready to run, and where it came from.
#[derive(Debug)]
pub struct LoadedModel {
    pub hf: HfModel,
    /// The HF folder the architecture, the processor files (tokenizer, chat template, preprocessor
    /// config) and the starting weights come from: the folder itself, or the run's initial model
    /// (see [`initial_model_dir`]).
    pub base: PathBuf,
    /// The run and checkpoint, when the weights are a run's; `None` for an HF folder.
    pub run: Option<RunCheckpoint>,
}

impl LoadedModel {
    /// The frame the model answers in: a run's, as its reward spec reads answers
    /// ([`crate::config::RewardConfig::spec_for`]); for an HF folder its family's.
    pub fn answer_frame(&self) -> Result<Frame, LoadError> {
        match &self.run {
            Some(run) => {
                let spec = run.config.reward.spec_for(&run.config.model);
                spec.map(|s| s.model_frame).map_err(|e| LoadError::Run {
                    path: run.run_dir.clone(),
                    problem: e.to_string(),
                })
            }
            None => Ok(Family::of_folder(&self.base)?.answer_frame()),
        }
    }

    /// One line naming the model, for a command's output.
    pub fn describe(&self) -> String {
        match &self.run {
            Some(run) => {
                let lora = match run.config.model.lora() {
                    true => format!(", LoRA rank {}", run.config.model.lora_rank),
                    false => String::new(),
                };
                format!(
                    "step {} of run {} ({}, initial model {}{lora})",
                    run.step,
                    run.run_dir.display(),
                    run.dir.display(),
                    self.base.display()
                )
            }
            None => format!("HF folder {}", self.base.display()),
        }
    }
}

/// Loads the model `path` names (see [`ModelSource::locate`]) on `device`. `kind` `None` takes a
/// run's training dtype (`model.dtype`, so answers are the ones the trainer's evaluation gave), and
/// for an HF folder f32 on the CPU and bf16 on a GPU. Checkpoint tensors of another dtype are
/// converted.
pub fn load_model(path: &Path, device: Device, kind: Option<Kind>) -> Result<LoadedModel, LoadError> {
    match ModelSource::locate(path)? {
        ModelSource::Folder(dir) => {
            let kind = kind.unwrap_or(match device {
                Device::Cpu => Kind::Float,
                _ => Kind::BFloat16,
            });
            Ok(LoadedModel {
                hf: hf_folder::load(&dir, device, kind)?,
                base: dir,
                run: None,
            })
        }
        ModelSource::Checkpoint { run_dir, dir } => load_checkpoint_model(run_dir, dir, device, kind),
    }
}

fn load_checkpoint_model(
    run_dir: PathBuf,
    dir: PathBuf,
    device: Device,
    kind: Option<Kind>,
) -> Result<LoadedModel, LoadError> {
    let config_path = run_dir.join(CONFIG_FILE);
    let run_error = |problem: String| LoadError::Run {
        path: config_path.clone(),
        problem,
    };
    let config = TrainConfig::load(&config_path, &[]).map_err(|e| run_error(e.to_string()))?;
    let base = initial_model_dir(&config.model, &run_dir);
    if !base.join(HF_CONFIG_FILE).is_file() {
        return Err(run_error(format!(
            "the run's initial model {} is not an HF folder (config.json missing): the checkpoint holds \
             trained tensors on top of it",
            base.display()
        )));
    }
    let kind = kind.unwrap_or(config.model.dtype.kind());
    let mut hf = hf_folder::load(&base, device, kind)?;
    if let Some(spec) = lora_spec(&config.model) {
        hf.model.add_lora(&spec)?;
    }
    hf.processor.image.min_pixels = config.model.min_pixels;
    hf.processor.image.max_pixels = config.model.max_pixels;
    hf.processor.files = config.data.image_limits();
    let (step, weights) = load_weights(&dir)?;
    let variables: Vec<(String, Tensor)> = hf.model.var_store().variables().into_iter().collect();
    restore_tensors(&variables, &in_kinds_of(&variables, weights))?;
    Ok(LoadedModel {
        hf,
        base,
        run: Some(RunCheckpoint {
            run_dir,
            dir,
            step,
            config,
        }),
    })
}

/// The HF folder a run's policy starts from: `RUN_DIR/initial-model/` (written by the trainer) for a
/// preset, else `model.path`.
pub fn initial_model_dir(model: &ModelConfig, run_dir: &Path) -> PathBuf {
    match model.preset.folder() {
        None => model.path.clone(),
        Some(_) => run_dir.join(INITIAL_MODEL_DIR),
    }
}

/// The adapters `[model]` attaches (`None` without LoRA), seeded as the trainer seeds them.
pub fn lora_spec(model: &ModelConfig) -> Option<LoraSpec> {
    model.lora().then(|| LoraSpec {
        rank: model.lora_rank as usize,
        alpha: model.lora_alpha,
        targets: model.lora_targets.clone(),
        vision: model.lora_vision,
        seed: model.seed as u64,
    })
}

/// `tensors` converted to the dtype of the variable of the same name, where there is one (a bf16
/// run's weights loaded in f32, say); the rest as they are, for [`restore_tensors`] to judge.
fn in_kinds_of(variables: &[(String, Tensor)], tensors: Vec<(String, Tensor)>) -> Vec<(String, Tensor)> {
    let kinds: HashMap<&str, Kind> = variables.iter().map(|(n, t)| (n.as_str(), t.kind())).collect();
    tensors
        .into_iter()
        .map(|(name, tensor)| match kinds.get(name.as_str()) {
            Some(&kind) if kind != tensor.kind() && tensor.is_floating_point() => {
                let converted = tensor.to_kind(kind);
                (name, converted)
            }
            _ => (name, tensor),
        })
        .collect()
}
