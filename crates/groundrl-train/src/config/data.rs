//! `[data]`: the training and validation samples and how prompts are worded.

use std::collections::BTreeMap;
use std::path::PathBuf;

use groundrl_core::data::confine::PathPolicy;
use groundrl_core::data::image_file::{DEFAULT_MAX_IMAGE_PIXELS, ImageLimits};
use serde::{Deserialize, Serialize};

use super::{ConfigError, RewardConfig, ensure};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DataConfig {
    /// Training samples: JSONL or verl Parquet of the core's `Sample`s (as `groundrl synth` and
    /// `groundrl data convert` write them). Required. Relative paths are read from the working
    /// directory. Default `""`.
    pub train: PathBuf,
    /// Validation samples in the same formats; `""` for none. Default `""`.
    pub val: PathBuf,
    /// Held-out test samples, every one answered greedily before the first GRPO step (after any
    /// warm-up) and after the last: `eval/before.jsonl` and `eval/after.jsonl` in the run folder
    /// hold each answer, and the run's summary the accuracy change. `""` for none. Default `""`.
    pub test: PathBuf,
    /// More held-out sets, by name (`[data.held_out]`, `medium = "hard/samples.jsonl"`, or the
    /// override `data.held_out.medium=...`): each answered as `data.test` is, into
    /// `eval/<name>/<label>.jsonl`, so that one run measures tasks unlike its training ones (harder
    /// screenshots, unseen layouts, other wording) beside its own test set. Default none.
    pub held_out: BTreeMap<String, PathBuf>,
    /// A reward of its own for a set of `data.held_out`, by the set's name, with `[reward]`'s keys
    /// (`[data.held_out_rewards.boxes]`, `spec = "rewards/detection.toml"`, `correct_threshold =
    /// 0.5`): a set of another task kind than training's (detection boxes when training clicks) is
    /// scored by the reward that reads its answers, and judged by a rule of its own, since the
    /// run's pass/fail component may not exist in that spec. Sets not named here are scored by
    /// `[reward]`. Default none.
    pub held_out_rewards: BTreeMap<String, RewardConfig>,
    /// Seed of the epoch shuffles. Default 0.
    pub seed: u64,
    /// Read image paths that leave their sample file's folder (absolute, `..`, symlinks out), as
    /// `--allow-outside-paths` does for the data commands; files under /dev are never read.
    /// Default false.
    pub allow_outside_paths: bool,
    /// Largest image decoded, in pixels (width x height); a larger one is refused before decoding
    /// and its sample counted bad. Default 67108864 (`DEFAULT_MAX_IMAGE_PIXELS`).
    pub max_image_pixels: u64,
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            train: PathBuf::new(),
            val: PathBuf::new(),
            test: PathBuf::new(),
            held_out: BTreeMap::new(),
            held_out_rewards: BTreeMap::new(),
            seed: 0,
            allow_outside_paths: false,
            max_image_pixels: DEFAULT_MAX_IMAGE_PIXELS,
        }
    }
}

impl DataConfig {
    /// How the run reads the images its sample files name.
    pub fn image_limits(&self) -> ImageLimits {
        ImageLimits {
            paths: PathPolicy::from_flag(self.allow_outside_paths),
            max_pixels: self.max_image_pixels,
        }
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        ensure(
            !self.train.as_os_str().is_empty(),
            "data.train",
            "is required: the training samples (JSONL or Parquet)",
        )?;
        for name in self.held_out.keys() {
            ensure(
                is_set_name(name),
                "data.held_out",
                format!(
                    "`{name}` is not a set name: letters, digits, `-` and `_` only (it names a \
                     folder of eval/), and not `test` (data.test's)"
                ),
            )?;
        }
        for (name, reward) in &self.held_out_rewards {
            ensure(
                self.held_out.contains_key(name),
                "data.held_out_rewards",
                format!("`{name}` names no set of data.held_out"),
            )?;
            reward.validate_in(&held_out_reward_key(name))?;
        }
        ensure(
            self.max_image_pixels > 0,
            "data.max_image_pixels",
            "must be at least 1 (the largest image decoded, in pixels)",
        )
    }
}

/// The config key of held-out set `name`'s reward (`data.held_out_rewards.<name>`), which its
/// errors name.
pub(crate) fn held_out_reward_key(name: &str) -> String {
    format!("data.held_out_rewards.{name}")
}

/// Whether `name` can name a held-out set: a plain folder name, not `test` (the name `data.test`'s
/// evaluations go by).
fn is_set_name(name: &str) -> bool {
    !name.is_empty()
        && name != "test"
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}
