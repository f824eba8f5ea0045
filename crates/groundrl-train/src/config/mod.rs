//! The trainer's configuration: one TOML file, mirrored by typed sections with documented defaults.
//!
//! ```toml
//! [model]
//! preset = "tiny"
//!
//! [data]
//! train = "data/synth-easy/train.jsonl"
//!
//! [rollout]
//! n = 4
//!
//! [reward]
//! spec = "configs/rewards/synthetic-click.toml"
//! correct_component = "click"
//! ```
//!
//! Every key has a default, so a file names only what it changes; `groundrl plan` and the run folder's
//! `config.toml` show the whole resolved config ([`TrainConfig::to_toml`]). Command-line overrides
//! such as `rollout.n=16 model.dtype=bf16` are applied on top of the file. An unknown key, in the file
//! or an override, is refused with the nearest valid name (see [`keys`]); a value of the wrong type
//! names its key and the type expected; [`TrainConfig::validate`] checks ranges and the relations
//! between keys.
//!
//! A section is a struct deriving `Serialize`, `Deserialize` and `Default` with
//! `#[serde(default, deny_unknown_fields)]` and no `Option` fields (an "off" value such as 0 or `""`
//! instead, so every valid key appears in the serialized defaults). Adding a section is adding its
//! field to [`TrainConfig`]: the loader, the override and the unknown-key checks are generic.

mod data;
mod distributed;
mod keys;
mod model;
mod reward;
mod rollout;
mod rounds;
mod sft;
mod tools;
mod trainer;

use std::collections::BTreeMap;
use std::path::Path;

use crate::advantage::{AdvantageConfig, AdvantageError};
use crate::loss::{LossConfig, LossError};
use crate::optim::OptimConfig;
use groundrl_core::telemetry::HealthConfig;
use groundrl_score::reward::SpecError;
use groundrl_tensor::family::FamilyError;
use groundrl_tensor::model_error::ModelError;
use serde::{Deserialize, Serialize};

pub use data::DataConfig;
pub(crate) use data::held_out_reward_key;
pub use distributed::DistributedConfig;
pub use model::{Checkpointing, DeviceKind, Dtype, LORA_TEXT_TARGETS, ModelConfig, ModelPreset};
pub use reward::RewardConfig;
pub use rollout::RolloutConfig;
pub use rounds::RoundsConfig;
pub use sft::SftConfig;
pub use tools::{KNOWN_TOOLS, ToolsConfig};
pub use trainer::{EarlyStoppingMode, TrainerConfig};

/// The whole configuration of a training run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    pub model: ModelConfig,
    pub data: DataConfig,
    pub rollout: RolloutConfig,
    pub reward: RewardConfig,
    pub advantage: AdvantageConfig,
    pub loss: LossConfig,
    pub optim: OptimConfig,
    pub sft: SftConfig,
    pub trainer: TrainerConfig,
    pub rounds: RoundsConfig,
    pub health: HealthConfig,
    pub tools: ToolsConfig,
    pub distributed: DistributedConfig,
}

/// Why a configuration was refused; each names the file, the override or the dotted key at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("config is not valid TOML: {0}")]
    Syntax(toml::de::Error),
    #[error("override `{text}`: {problem}")]
    Override { text: String, problem: String },
    #[error("unknown key `{key}`; did you mean `{suggestion}`?")]
    UnknownKey { key: String, suggestion: String },
    /// A value of the wrong type or an unknown name, as the deserializer words it.
    #[error("`{key}`: {problem}")]
    Value { key: String, problem: String },
    /// A value out of range, or keys that do not fit together.
    #[error("`{key}`: {problem}")]
    Invalid { key: String, problem: String },
    #[error("cannot write the config as TOML: {0}")]
    Serialize(#[from] toml::ser::Error),
    #[error(transparent)]
    RewardSpec(#[from] SpecError),
    #[error("model: {0}")]
    Model(#[from] ModelError),
    #[error("model: {0}")]
    Family(#[from] FamilyError),
}

/// `Ok` when `holds`, else the `Invalid` error for `key`.
fn ensure(holds: bool, key: &str, problem: impl Into<String>) -> Result<(), ConfigError> {
    if holds { Ok(()) } else { Err(invalid(key, problem)) }
}

fn invalid(key: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        problem: problem.into(),
    }
}

impl TrainConfig {
    /// Reads a config file and applies `overrides` (`dotted.key=value`) on top. The result is
    /// complete but not yet checked: call [`Self::validate`].
    pub fn load(path: &Path, overrides: &[String]) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml_str(&text, overrides)
    }

    /// Parses config text and applies `overrides`; see [`Self::load`].
    pub fn from_toml_str(text: &str, overrides: &[String]) -> Result<Self, ConfigError> {
        let mut table: toml::Table = text.parse().map_err(ConfigError::Syntax)?;
        for text in overrides {
            keys::apply_override(&mut table, text)?;
        }
        let known = toml::Table::try_from(Self::default())?;
        keys::check_known(&table, &known, "")?;
        serde_path_to_error::deserialize(table).map_err(|e| ConfigError::Value {
            key: e.path().to_string(),
            problem: e.into_inner().message().trim().to_string(),
        })
    }

    /// The keys that shape the model and its optimizer state, with their values as TOML writes them:
    /// where the weights come from (`model.path`, `model.preset`), their dtype, which of them train
    /// (`model.freeze_vision`, the LoRA keys) and whether AdamW keeps f32 masters. A checkpoint holds
    /// state of exactly that shape, so a resume keeps them all ([`crate::trainer::RunState`]).
    pub fn state_shaping_keys(&self) -> Result<BTreeMap<String, String>, ConfigError> {
        const KEYS: [&str; 9] = [
            "model.path",
            "model.preset",
            "model.dtype",
            "model.freeze_vision",
            "model.lora_rank",
            "model.lora_alpha",
            "model.lora_targets",
            "model.lora_vision",
            "optim.fp32_master",
        ];
        let table = toml::Table::try_from(self)?;
        Ok(KEYS
            .iter()
            .map(|key| {
                let (section, name) = key.split_once('.').unwrap_or(("", key));
                let value = table.get(section).and_then(|s| s.get(name));
                (
                    key.to_string(),
                    value.map(ToString::to_string).unwrap_or_default(),
                )
            })
            .collect())
    }

    /// The whole resolved config as TOML, every key written: [`Self::from_toml_str`] reads it back
    /// to an equal config. The run folder keeps it.
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        Ok(toml::to_string(self)?)
    }

    /// Checks ranges and the relations between keys; the error names the key to change.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.model.validate()?;
        self.data.validate()?;
        self.rollout.validate()?;
        self.reward.validate_in("reward")?;
        self.advantage.validate().map_err(|e| match e {
            AdvantageError::Config { key, problem } => invalid(key, problem),
            other => invalid("advantage", other.to_string()),
        })?;
        self.loss.validate().map_err(|e| match e {
            LossError::Config { key, problem } => invalid(key, problem),
            other => invalid("loss", other.to_string()),
        })?;
        self.optim
            .validate()
            .map_err(|e| invalid("optim", e.to_string()))?;
        self.sft.validate()?;
        self.trainer.validate()?;
        self.rounds.validate()?;
        self.health
            .validate()
            .map_err(|e| invalid("health", e.to_string()))?;
        self.tools.validate(self.rollout.max_new_tokens)?;
        self.distributed.validate()?;
        let completions = self.rollout.completions_per_step();
        ensure(
            completions.is_multiple_of(u64::from(self.trainer.mini_batch_size)),
            "trainer.mini_batch_size",
            format!(
                "{} does not divide the {completions} completions of a step \
                 (rollout.prompts_per_step {} x rollout.n {})",
                self.trainer.mini_batch_size, self.rollout.prompts_per_step, self.rollout.n
            ),
        )?;
        let last_step = self
            .trainer
            .max_steps
            .saturating_mul(u64::from(self.rounds.count));
        ensure(
            self.trainer.max_steps == 0 || self.trainer.profile_step <= last_step,
            "trainer.profile_step",
            format!(
                "step {} comes after the run's last, {last_step} (trainer.max_steps {} x rounds.count \
                 {}): nothing would be recorded",
                self.trainer.profile_step, self.trainer.max_steps, self.rounds.count
            ),
        )?;
        // What runs on the validation samples, and so needs them.
        let uses_val = [
            (
                !self.rounds.temperatures.is_empty(),
                "the temperature sweep of rounds.temperatures (it is run on data.val)",
            ),
            (
                self.trainer.early_stopping_patience > 0,
                "early stopping (it watches validation metrics)",
            ),
            (self.sft.val_freq > 0, "the warm-up's validations (sft.val_freq)"),
        ];
        for (_, what) in uses_val.into_iter().filter(|(used, _)| *used) {
            ensure(
                !self.data.val.as_os_str().is_empty(),
                "data.val",
                format!("is required for {what}"),
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
