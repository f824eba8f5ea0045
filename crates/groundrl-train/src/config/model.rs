//! `[model]`: which model to train, in which dtype and on which device, what trains (full
//! weights, frozen vision, LoRA adapters) and the image budget of its processor.

use std::path::PathBuf;

use groundrl_score::frame::{Frame, FrameChoice};
use groundrl_score::resize::{DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS};
use groundrl_tensor::family::{self, Family};
use groundrl_tensor::hf_folder::RandomFolder;
use groundrl_tensor::model::{Architecture, Recompute};
use serde::{Deserialize, Serialize};

use super::{ConfigError, ensure};

/// The LLM projections LoRA may adapt: attention q/k/v/o and the SwiGLU MLP's gate/up/down.
pub use groundrl_tensor::lora::LLM_TARGETS as LORA_TEXT_TARGETS;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// An HF model folder (config.json, safetensors, tokenizer, preprocessor) to start from; `""` to
    /// build `preset` instead. Relative paths are read from the working directory. Default `""`.
    pub path: PathBuf,
    /// A built-in shape with random weights, used when `path` is `""`: `tiny` (CPU-sized, with its
    /// own tokenizer) or `3b` (Qwen2.5-VL-3B's shape). `none` when `path` is given. Default `none`.
    pub preset: ModelPreset,
    /// Seed of the preset's random initialisation. Default 0.
    pub seed: i64,
    /// Parameter and activation dtype. Default `f32`.
    pub dtype: Dtype,
    /// Where the model lives and trains. Default `cpu`.
    pub device: DeviceKind,
    /// Keep the vision tower's weights fixed: it then runs without a graph and needs neither
    /// gradients nor optimizer state. Default true.
    pub freeze_vision: bool,
    /// Recompute each block in the backward instead of keeping its activations: a little more
    /// compute for much less memory. `true`, `false`, `"tower"` (a trained vision tower's blocks
    /// alone: a screenshot's tower keeps more activations than the decoder for less compute), or
    /// `"auto"`: the first of off, tower and on whose memory plan leaves a tenth of the GPU free
    /// (decided by `groundrl train` and `plan` from the GPU's memory; the run folder's config
    /// records the decision). Default true.
    pub gradient_checkpointing: Checkpointing,
    /// Smallest resized image area in pixels (the processor's `min_pixels`). Default 3136 (56 x 56).
    pub min_pixels: u64,
    /// Largest resized image area in pixels (the processor's `max_pixels`): bounds the image tokens
    /// of a prompt, one per 28 x 28 pixels. Default 12845056 (Qwen2.5-VL's default).
    pub max_pixels: u64,
    /// LoRA rank; 0 trains the full weights instead of adapters. Default 0.
    pub lora_rank: u32,
    /// LoRA scale numerator: an adapter adds `lora_alpha / lora_rank * B A x`. Default 32.
    pub lora_alpha: f64,
    /// Which projections of every decoder layer get an adapter (names from [`LORA_TEXT_TARGETS`]).
    /// Default all seven.
    pub lora_targets: Vec<String>,
    /// Also adapt the vision tower's block projections (qkv, proj, gate/up/down). Default false.
    pub lora_vision: bool,
    /// The frame the model answers in, which prompts of samples without their own ask for and
    /// answers are read in: `auto` (the frame of the model's family: resized pixels for Qwen2.5-VL,
    /// the 0-1000 grid for Qwen3-VL) or a frame by name (`resized`, `qwen1000`, `pixel`,
    /// `normalized`). A reward spec that names its `model_frame` decides it instead. Default `auto`.
    pub answer_frame: FrameChoice,
    /// Let libtorch's attention use cuDNN's kernels on CUDA. cuDNN builds a plan for every attention
    /// shape it has not seen (docs/performance.md gives what that cost), and a GRPO step brings new ones with
    /// every prompt length, image size and window count; the flash kernels take any length at
    /// once. Default false (see `groundrl_tensor::attention::use_cudnn_attention`).
    pub cudnn_attention: bool,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            path: PathBuf::new(),
            preset: ModelPreset::NONE,
            seed: 0,
            dtype: Dtype::F32,
            device: DeviceKind::Cpu,
            freeze_vision: true,
            gradient_checkpointing: Checkpointing::On,
            min_pixels: DEFAULT_MIN_PIXELS,
            max_pixels: DEFAULT_MAX_PIXELS,
            lora_rank: 0,
            lora_alpha: 32.0,
            lora_targets: LORA_TEXT_TARGETS.iter().map(|t| t.to_string()).collect(),
            lora_vision: false,
            answer_frame: FrameChoice::Auto,
            cudnn_attention: false,
        }
    }
}

/// A built-in model shape (`model.preset`): a name [`RandomFolder::from_name`] knows (its one table of
/// presets, which `groundrl model init` and `bench` read too), or `none` (the default), where the
/// model comes from `model.path`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelPreset(Option<RandomFolder>);

impl ModelPreset {
    /// No preset: the model comes from `model.path`.
    pub const NONE: Self = Self(None);

    /// The random-init folder the preset writes; `None` for no preset.
    pub fn folder(self) -> Option<RandomFolder> {
        self.0
    }

    /// The family of the preset's shape; `None` for no preset.
    pub fn family(self) -> Option<Family> {
        self.folder().map(RandomFolder::family)
    }
}

impl Serialize for ModelPreset {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.map_or("none", RandomFolder::name))
    }
}

impl<'de> Deserialize<'de> for ModelPreset {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        if name == "none" {
            return Ok(Self::NONE);
        }
        RandomFolder::from_name(&name)
            .map(|folder| Self(Some(folder)))
            .map_err(|e| serde::de::Error::custom(format!("{e}, or none")))
    }
}

/// Gradient checkpointing (`model.gradient_checkpointing`): `true`, `false`, `"tower"` or `"auto"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checkpointing {
    On,
    Off,
    /// The trained vision tower's blocks alone are recomputed ([`Recompute::Tower`]); with a frozen
    /// tower the same as `Off`.
    Tower,
    /// The least recompute the memory plan allows (`plan::decide_checkpointing`); on until decided,
    /// so that a run that never saw a GPU plan keeps the memory-safe choice.
    Auto,
}

impl Checkpointing {
    /// The blocks a training pass recomputes: `Auto` undecided recomputes all.
    pub fn recompute(self) -> Recompute {
        match self {
            Checkpointing::Off => Recompute::Off,
            Checkpointing::Tower => Recompute::TOWER,
            Checkpointing::On | Checkpointing::Auto => Recompute::All,
        }
    }

    /// The word a config writes for it (`true`, `false`, `tower`, `auto`).
    pub fn word(self) -> &'static str {
        match self {
            Checkpointing::On => "true",
            Checkpointing::Off => "false",
            Checkpointing::Tower => "tower",
            Checkpointing::Auto => "auto",
        }
    }
}

impl From<bool> for Checkpointing {
    fn from(on: bool) -> Self {
        if on { Checkpointing::On } else { Checkpointing::Off }
    }
}

impl Serialize for Checkpointing {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Checkpointing::On => serializer.serialize_bool(true),
            Checkpointing::Off => serializer.serialize_bool(false),
            words => serializer.serialize_str(words.word()),
        }
    }
}

impl<'de> Deserialize<'de> for Checkpointing {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Flag(bool),
            Word(String),
        }
        match Written::deserialize(deserializer)? {
            Written::Flag(on) => Ok(on.into()),
            Written::Word(word) if word == "auto" => Ok(Checkpointing::Auto),
            Written::Word(word) if word == "tower" => Ok(Checkpointing::Tower),
            Written::Word(word) => Err(serde::de::Error::custom(format!(
                "expected true, false, \"tower\" or \"auto\", got \"{word}\""
            ))),
        }
    }
}

/// Parameter dtype (`model.dtype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    F32,
    Bf16,
}

impl Dtype {
    /// Bytes of one element.
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::F32 => 4,
            Dtype::Bf16 => 2,
        }
    }

    pub fn kind(self) -> tch::Kind {
        match self {
            Dtype::F32 => tch::Kind::Float,
            Dtype::Bf16 => tch::Kind::BFloat16,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::Bf16 => "bf16",
        }
    }
}

/// Compute device (`model.device`); `cuda` is the first GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    Cpu,
    Cuda,
}

impl DeviceKind {
    pub fn device(self) -> tch::Device {
        match self {
            DeviceKind::Cpu => tch::Device::Cpu,
            DeviceKind::Cuda => tch::Device::Cuda(0),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Cuda => "cuda",
        }
    }
}

impl ModelConfig {
    /// The architecture this section names: the folder's config.json, or the preset's shape.
    pub fn architecture(&self) -> Result<Architecture, ConfigError> {
        match self.preset.folder() {
            Some(folder) => Ok(folder.architecture()),
            None => Ok(family::architecture(&self.path)?),
        }
    }

    /// The family of the model this section names: the preset's, or the folder's (its
    /// config.json's `model_type`).
    pub fn family(&self) -> Result<Family, ConfigError> {
        match self.preset.family() {
            Some(family) => Ok(family),
            None => Ok(Family::of_folder(&self.path)?),
        }
    }

    /// The frame the model answers in: `answer_frame`, `auto` read as the family's.
    pub fn answer_frame(&self) -> Result<Frame, ConfigError> {
        match self.answer_frame {
            FrameChoice::Named(frame) => Ok(frame),
            FrameChoice::Auto => Ok(self.family()?.answer_frame()),
        }
    }

    /// Whether LoRA adapters train instead of the full weights.
    pub fn lora(&self) -> bool {
        self.lora_rank > 0
    }

    /// Whether the vision tower has trainable weights (then it keeps a graph in the forward). With
    /// LoRA every base weight is frozen, so only `lora_vision` trains it.
    pub fn vision_trained(&self) -> bool {
        if self.lora() {
            self.lora_vision
        } else {
            !self.freeze_vision
        }
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let has_path = !self.path.as_os_str().is_empty();
        ensure(
            has_path != self.preset.folder().is_some(),
            "model.path",
            "give exactly one of `model.path` (a model folder) and `model.preset` (tiny, small, 3b or 7b)",
        )?;
        ensure(
            self.min_pixels > 0,
            "model.min_pixels",
            "must be positive, found 0",
        )?;
        ensure(
            self.min_pixels <= self.max_pixels,
            "model.max_pixels",
            format!(
                "{} is smaller than model.min_pixels {}",
                self.max_pixels, self.min_pixels
            ),
        )?;
        if self.lora() {
            self.validate_lora()?;
        } else {
            ensure(
                !self.lora_vision,
                "model.lora_vision",
                "needs LoRA on (model.lora_rank > 0)",
            )?;
        }
        Ok(())
    }

    fn validate_lora(&self) -> Result<(), ConfigError> {
        ensure(
            self.lora_alpha.is_finite() && self.lora_alpha > 0.0,
            "model.lora_alpha",
            format!("must be positive, found {}", self.lora_alpha),
        )?;
        ensure(
            !self.lora_targets.is_empty(),
            "model.lora_targets",
            "is empty with LoRA on",
        )?;
        for (i, target) in self.lora_targets.iter().enumerate() {
            ensure(
                LORA_TEXT_TARGETS.contains(&target.as_str()),
                "model.lora_targets",
                format!(
                    "{target:?} is not a projection; use {}",
                    LORA_TEXT_TARGETS.join(", ")
                ),
            )?;
            ensure(
                !self.lora_targets[..i].contains(target),
                "model.lora_targets",
                format!("{target:?} is listed twice"),
            )?;
        }
        Ok(())
    }
}
