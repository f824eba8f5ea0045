//! `[reward]`: the reward spec that scores completions, and the rule that calls a completion correct.

use std::path::PathBuf;

use groundrl_score::reward::{RewardSpec, SpecError};
use serde::{Deserialize, Serialize};

use super::{ConfigError, ModelConfig, ensure};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RewardConfig {
    /// A reward-spec TOML file (see `groundrl_score::reward::spec`); `""` when `inline` gives the spec.
    /// Relative paths are read from the working directory. Default `""`.
    pub spec: PathBuf,
    /// The reward spec written in place, as a `[reward.inline]` table with the spec file's keys
    /// (`model_frame`, `[reward.inline.components.NAME]`...); empty when `spec` names a file. Its keys
    /// are checked when the spec is loaded ([`RewardConfig::load_spec`]), not against this struct.
    pub inline: toml::Table,
    /// The component whose value decides whether a completion is correct (accuracy, early stopping);
    /// `""` uses the total reward. Default `""`.
    pub correct_component: String,
    /// A completion is correct when that value is at least this. Default 0.5.
    pub correct_threshold: f64,
}

impl Default for RewardConfig {
    fn default() -> Self {
        Self {
            spec: PathBuf::new(),
            inline: toml::Table::new(),
            correct_component: String::new(),
            correct_threshold: 0.5,
        }
    }
}

impl RewardConfig {
    /// Reads the spec (file or inline table) and checks that `correct_component` is one of its
    /// components.
    pub fn load_spec(&self) -> Result<RewardSpec, ConfigError> {
        self.load_spec_in("reward")
    }

    /// [`Self::load_spec`] of the config at `section` (`reward`, or a held-out set's
    /// `data.held_out_rewards.<name>`), which its errors name.
    fn load_spec_in(&self, section: &str) -> Result<RewardSpec, ConfigError> {
        // The spec's own errors say what is wrong in it; the key says which spec.
        let named = |key: &str| {
            let key = format!("{section}.{key}");
            move |e: SpecError| ConfigError::Invalid {
                key,
                problem: e.to_string(),
            }
        };
        let spec = if self.inline.is_empty() {
            RewardSpec::load(&self.spec).map_err(named("spec"))?
        } else {
            RewardSpec::from_toml(&toml::to_string(&self.inline)?).map_err(named("inline"))?
        };
        let names: Vec<&str> = spec.components().iter().map(|c| c.name.as_str()).collect();
        ensure(
            self.correct_component.is_empty() || names.contains(&self.correct_component.as_str()),
            &format!("{section}.correct_component"),
            format!(
                "{:?} is not a component of the reward spec ({})",
                self.correct_component,
                names.join(", ")
            ),
        )?;
        Ok(spec)
    }

    /// The spec as it reads the answers of `model` ([`Self::load_spec`]): `model_frame = "auto"`
    /// reads them in `model.answer_frame`, itself `auto` for the model's family; a frame the spec
    /// names wins. Both naming different frames is refused: prompts would ask in one and rewards
    /// read in the other.
    pub fn spec_for(&self, model: &ModelConfig) -> Result<RewardSpec, ConfigError> {
        self.spec_for_in(model, "reward")
    }

    /// [`Self::spec_for`] of the config at `section` ([`Self::load_spec_in`]).
    pub fn spec_for_in(&self, model: &ModelConfig, section: &str) -> Result<RewardSpec, ConfigError> {
        let spec = self.load_spec_in(section)?;
        if let (Some(spec_frame), Some(model_frame)) = (spec.frame_choice.named(), model.answer_frame.named())
        {
            ensure(
                spec_frame == model_frame,
                "model.answer_frame",
                format!(
                    "is {model_frame}, but the reward spec reads answers in {spec_frame} (its \
                     model_frame): name one frame, or leave either as auto"
                ),
            )?;
        }
        let frame = match spec.frame_choice.named() {
            Some(frame) => frame,
            None => model.answer_frame()?,
        };
        Ok(spec.for_model(frame))
    }

    /// Checks the config at `section` (`reward`, or `data.held_out_rewards.<name>`).
    pub(super) fn validate_in(&self, section: &str) -> Result<(), ConfigError> {
        ensure(
            self.spec.as_os_str().is_empty() != self.inline.is_empty(),
            &format!("{section}.spec"),
            format!(
                "give exactly one of `{section}.spec` (a file) and `[{section}.inline]` (the spec in place)"
            ),
        )?;
        ensure(
            self.correct_threshold.is_finite(),
            &format!("{section}.correct_threshold"),
            format!("must be a finite number, found {}", self.correct_threshold),
        )
    }
}
