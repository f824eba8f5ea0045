//! An HF model folder as a whole: the model and its processor loaded together and checked against each
//! other, a trained model saved back with the source folder's processor files, and the built-in
//! `tiny` preset written in the same format.

use std::path::{Path, PathBuf};

use tch::{Device, Kind};

use crate::family::{self, Family, FamilyError};
use crate::model::{Architecture, Model};
use crate::model_error::ModelError;
use crate::processor::chat_template::{CHAT_TEMPLATE_JINJA_FILE, QWEN2_5_VL_TEMPLATE};
use crate::processor::image::ImageProcessor;
use crate::processor::tiny_tokenizer::{self, write_tiny_tokenizer};
use crate::processor::{PREPROCESSOR_CONFIG_FILE, Processor, ProcessorError};
use crate::qwen2_5_vl::{self, Qwen25Vl, Qwen25VlConfig};
use crate::qwen3_5::{self, Qwen35};
use crate::qwen3_vl::{self, Qwen3Vl};
use crate::special_ids::SpecialIds;

#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Family(#[from] FamilyError),
    #[error(transparent)]
    Processor(#[from] ProcessorError),
    #[error("{dir}: {problem}")]
    Inconsistent { dir: String, problem: String },
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
}

fn io(path: &Path, source: std::io::Error) -> FolderError {
    FolderError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// A model (of any supported family, [`family::load`]) with the processor that makes its inputs.
#[derive(Debug)]
pub struct HfModel {
    pub model: Box<dyn Model>,
    pub processor: Processor,
}

/// Loads model and processor of `dir` and checks that the tokenizer's special ids are the ones the
/// model config names (a mismatch would put image features on the wrong tokens).
pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<HfModel, FolderError> {
    let processor = Processor::from_folder(dir)?;
    with_processor(dir, family::load(dir, device, kind)?, processor)
}

/// `model` with `processor` (both of `dir`), once the tokenizer's special ids are checked against
/// the model's.
fn with_processor(dir: &Path, model: Box<dyn Model>, processor: Processor) -> Result<HfModel, FolderError> {
    check_ids(
        dir,
        model.as_ref(),
        &processor.tokenizer.special_ids(),
        processor.tokenizer.vocab_size(),
    )?;
    Ok(HfModel { model, processor })
}

fn check_ids(dir: &Path, model: &dyn Model, ids: &SpecialIds, vocab: usize) -> Result<(), FolderError> {
    let v = model.vision_ids();
    let pairs = [
        ("image_token_id", v.image, ids.image_pad),
        ("video_token_id", v.video, ids.video_pad),
        ("vision_start_token_id", v.start, ids.vision_start),
        ("vision_end_token_id", v.end, ids.vision_end),
    ];
    for (field, config, tokenizer) in pairs {
        if config != i64::from(tokenizer) {
            return Err(FolderError::Inconsistent {
                dir: dir.display().to_string(),
                problem: format!("config.json {field} is {config}, the tokenizer's token has id {tokenizer}"),
            });
        }
    }
    if vocab as i64 > model.vocab_size() {
        return Err(FolderError::Inconsistent {
            dir: dir.display().to_string(),
            problem: format!(
                "the tokenizer has {vocab} tokens, the model's vocab_size is {}",
                model.vocab_size()
            ),
        });
    }
    Ok(())
}

/// Files of a model folder that hold weights or the model config; everything else belongs to the
/// processor (tokenizer, chat template, preprocessor and generation configs) and is copied as is.
fn is_model_file(name: &str) -> bool {
    name == "config.json"
        || name.ends_with(".safetensors")
        || name == "model.safetensors.index.json"
        || name.ends_with(".bin")
        || name == "pytorch_model.bin.index.json"
}

/// Saves `model` into `out` with the processor files of `source` copied unchanged, so the result is
/// a complete folder transformers loads (and so is ours). `out` may not be `source`.
pub fn save(model: &dyn Model, source: &Path, out: &Path) -> Result<(), FolderError> {
    if same_path(source, out) {
        return Err(FolderError::Inconsistent {
            dir: out.display().to_string(),
            problem: "saving over the source folder is refused (its files would be replaced mid-copy)".into(),
        });
    }
    model.save(out)?;
    for entry in std::fs::read_dir(source).map_err(|e| io(source, e))? {
        let entry = entry.map_err(|e| io(source, e))?;
        let name = entry.file_name();
        let is_file = entry.file_type().map_err(|e| io(&entry.path(), e))?.is_file();
        if is_file && !is_model_file(&name.to_string_lossy()) {
            std::fs::copy(entry.path(), out.join(&name)).map_err(|e| io(&entry.path(), e))?;
        }
    }
    Ok(())
}

fn same_path(a: &Path, b: &Path) -> bool {
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| PathBuf::from(p));
    canonical(a) == canonical(b)
}

/// The file of an HF folder that holds its generation defaults (transformers' `GenerationConfig`).
pub const GENERATION_CONFIG_FILE: &str = "generation_config.json";

/// The `max_new_tokens` of `dir`'s generation config: `None` when the file or the key is absent (or
/// null); an error naming the file when it is not a JSON object or the value is not an integer >= 1.
/// `groundrl export` writes its run's token limit there, so that a model asked from the exported
/// folder stops where the run's answers stopped.
pub fn generation_max_new_tokens(dir: &Path) -> Result<Option<usize>, FolderError> {
    let path = dir.join(GENERATION_CONFIG_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&path, e)),
    };
    let bad = |problem: String| FolderError::Inconsistent {
        dir: path.display().to_string(),
        problem,
    };
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let value = json
        .as_object()
        .ok_or_else(|| bad("not a JSON object".into()))?
        .get("max_new_tokens");
    match value {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => match v.as_u64().filter(|&n| n >= 1) {
            Some(n) => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
            None => Err(bad(format!(
                "max_new_tokens: expected an integer >= 1, found {v}"
            ))),
        },
    }
}

/// Image budget of the tiny preset: up to 256 merged image tokens per image (448x448 pixels), so a
/// CPU can train on screenshots.
pub const TINY_MAX_PIXELS: u64 = 448 * 448;

/// The random-init folders this module writes, each complete with the tiny tokenizer, our chat
/// template and a preprocessor config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RandomFolder {
    /// A small model with a CPU-sized pixel budget ([`TINY_MAX_PIXELS`]).
    Tiny,
    /// About 30M parameters, the tiny preset's pixel budget.
    Small,
    /// Qwen2.5-VL-3B's shape with the tiny tokenizer's special ids (the vocabulary keeps Qwen's
    /// size), for measuring training and rollouts of the real shape end to end where Qwen's
    /// tokenizer cannot be shipped. Pixel budget: the processor's default.
    Qwen3b,
    /// The same for Qwen2.5-VL-7B's shape (about 8.29B parameters: 16.6 GB of bf16 to write).
    Qwen7b,
    /// A small Qwen3-VL (DeepStack tower, q/k-normed decoder) of [`Self::Tiny`]'s size, with
    /// Qwen3-VL's image settings (16-pixel patches, mean and std 0.5).
    Qwen3Tiny,
    /// A Qwen3-VL of [`Self::Small`]'s size (about 30M parameters) with the tiny preset's pixel
    /// budget: the GPU demo's Qwen3-VL model.
    Qwen3Small,
    /// Qwen3-VL-2B-Instruct's shape with the tiny tokenizer's special ids, as [`Self::Qwen3b`].
    Qwen3Vl2b,
    /// Qwen3-VL-4B-Instruct's shape, as [`Self::Qwen3Vl2b`].
    Qwen3Vl4b,
    /// Qwen3-VL-8B-Instruct's shape, as [`Self::Qwen3Vl2b`].
    Qwen3Vl8b,
    /// A small Qwen3.5 (linear and full attention three to one) of [`Self::Tiny`]'s size, with
    /// Qwen3-VL's image settings.
    Qwen35Tiny,
    /// A Qwen3.5 of about 30M parameters with the tiny preset's pixel budget: the GPU demo's Qwen3.5.
    Qwen35Small,
    /// A dense Qwen3.5 shape near 4B ([`crate::qwen3_5::presets`]) with the tiny tokenizer's
    /// special ids, for benchmarks.
    Qwen35_4b,
}

/// Every random folder with the name `groundrl model init --preset`, `bench --preset` and
/// `model.preset` know it by.
const NAMES: [(&str, RandomFolder); 12] = [
    ("tiny", RandomFolder::Tiny),
    ("small", RandomFolder::Small),
    ("3b", RandomFolder::Qwen3b),
    ("7b", RandomFolder::Qwen7b),
    ("qwen3-tiny", RandomFolder::Qwen3Tiny),
    ("qwen3-small", RandomFolder::Qwen3Small),
    ("qwen3-2b", RandomFolder::Qwen3Vl2b),
    ("qwen3-4b", RandomFolder::Qwen3Vl4b),
    ("qwen3-8b", RandomFolder::Qwen3Vl8b),
    ("qwen3.5-tiny", RandomFolder::Qwen35Tiny),
    ("qwen3.5-small", RandomFolder::Qwen35Small),
    ("qwen3.5-4b", RandomFolder::Qwen35_4b),
];

/// Qwen3-VL's released processor settings: 16-pixel patches, mean and std 0.5, and its pixel
/// budget (`size.shortest_edge` 65,536, `size.longest_edge` 16,777,216 in the released
/// `preprocessor_config.json`).
fn qwen3_vl_image_processor() -> ImageProcessor {
    ImageProcessor {
        min_pixels: 65_536,
        max_pixels: 16_777_216,
        patch_size: 16,
        image_mean: [0.5; 3],
        image_std: [0.5; 3],
        ..ImageProcessor::default()
    }
}

/// A random folder's model config, of its family.
enum FolderConfig {
    Qwen25Vl(Qwen25VlConfig),
    Qwen3Vl(qwen3_vl::Qwen3VlConfig),
    Qwen35(qwen3_5::Qwen35Config),
}

impl RandomFolder {
    /// The folder of a preset name (`tiny`, `qwen3-4b`, ...); the error lists the names.
    pub fn from_name(name: &str) -> Result<Self, String> {
        NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, f)| f)
            .ok_or_else(|| {
                let names: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
                format!("unknown preset {name:?}: use one of {}", names.join(", "))
            })
    }

    /// The preset name of the folder.
    pub fn name(self) -> &'static str {
        NAMES.iter().find(|(_, f)| *f == self).map_or("", |(n, _)| n)
    }

    /// A released model's shape (config and weights; Qwen's tokenizer cannot be shipped), as
    /// opposed to a small model made to be trained from scratch with the tiny tokenizer.
    pub fn is_released_shape(self) -> bool {
        matches!(
            self,
            Self::Qwen3b
                | Self::Qwen7b
                | Self::Qwen3Vl2b
                | Self::Qwen3Vl4b
                | Self::Qwen3Vl8b
                | Self::Qwen35_4b
        )
    }

    fn config(self) -> FolderConfig {
        use qwen2_5_vl::presets;
        let vocab = i64::from(tiny_tokenizer::VOCAB_SIZE);
        match self {
            Self::Tiny => FolderConfig::Qwen25Vl(presets::tiny(vocab, &tiny_ids())),
            Self::Small => FolderConfig::Qwen25Vl(presets::small(vocab, &tiny_ids())),
            Self::Qwen3b => FolderConfig::Qwen25Vl(presets::qwen2_5_vl_3b_with_ids(&tiny_ids())),
            Self::Qwen7b => FolderConfig::Qwen25Vl(presets::qwen2_5_vl_7b_with_ids(&tiny_ids())),
            Self::Qwen3Tiny => FolderConfig::Qwen3Vl(qwen3_vl::presets::tiny(vocab, &tiny_ids())),
            Self::Qwen3Small => FolderConfig::Qwen3Vl(qwen3_vl::presets::small(vocab, &tiny_ids())),
            Self::Qwen3Vl2b => FolderConfig::Qwen3Vl(qwen3_vl::presets::qwen3_vl_2b_with_ids(&tiny_ids())),
            Self::Qwen3Vl4b => FolderConfig::Qwen3Vl(qwen3_vl::presets::qwen3_vl_4b_with_ids(&tiny_ids())),
            Self::Qwen3Vl8b => FolderConfig::Qwen3Vl(qwen3_vl::presets::qwen3_vl_8b_with_ids(&tiny_ids())),
            Self::Qwen35Tiny => FolderConfig::Qwen35(qwen3_5::presets::tiny(vocab, &tiny_ids())),
            Self::Qwen35Small => FolderConfig::Qwen35(qwen3_5::presets::small(vocab, &tiny_ids())),
            Self::Qwen35_4b => FolderConfig::Qwen35(qwen3_5::presets::qwen3_5_4b_with_ids(&tiny_ids())),
        }
    }

    /// [`Self::config`] with Qwen's vocabulary and special ids (its tokenizer's) in place of the
    /// tiny tokenizer's: the released models' for the 3B and 7B shapes.
    fn released_config(self) -> FolderConfig {
        use qwen2_5_vl::presets::{self, QWEN_IDS, QWEN_VOCAB_SIZE};
        match self {
            Self::Tiny => FolderConfig::Qwen25Vl(presets::tiny(QWEN_VOCAB_SIZE, &QWEN_IDS)),
            Self::Small => FolderConfig::Qwen25Vl(presets::small(QWEN_VOCAB_SIZE, &QWEN_IDS)),
            Self::Qwen3b => FolderConfig::Qwen25Vl(presets::qwen2_5_vl_3b()),
            Self::Qwen7b => FolderConfig::Qwen25Vl(presets::qwen2_5_vl_7b()),
            Self::Qwen3Tiny => FolderConfig::Qwen3Vl(qwen3_vl::presets::tiny(QWEN_VOCAB_SIZE, &QWEN_IDS)),
            Self::Qwen3Small => FolderConfig::Qwen3Vl(qwen3_vl::presets::small(QWEN_VOCAB_SIZE, &QWEN_IDS)),
            Self::Qwen3Vl2b => FolderConfig::Qwen3Vl(qwen3_vl::presets::qwen3_vl_2b()),
            Self::Qwen3Vl4b => FolderConfig::Qwen3Vl(qwen3_vl::presets::qwen3_vl_4b()),
            Self::Qwen3Vl8b => FolderConfig::Qwen3Vl(qwen3_vl::presets::qwen3_vl_8b()),
            Self::Qwen35Tiny | Self::Qwen35Small | Self::Qwen35_4b => {
                use qwen3_5::presets::{QWEN3_5_IDS, QWEN3_5_VOCAB_SIZE};
                FolderConfig::Qwen35(match self {
                    Self::Qwen35Tiny => qwen3_5::presets::tiny(QWEN3_5_VOCAB_SIZE, &QWEN3_5_IDS),
                    Self::Qwen35Small => qwen3_5::presets::small(QWEN3_5_VOCAB_SIZE, &QWEN3_5_IDS),
                    _ => qwen3_5::presets::qwen3_5_4b_with_ids(&QWEN3_5_IDS),
                })
            }
        }
    }

    /// The folder's model shape in family-neutral numbers, without drawing weights.
    pub fn architecture(self) -> Architecture {
        self.config().architecture()
    }

    /// The family of the folder's model.
    pub fn family(self) -> Family {
        match self.config() {
            FolderConfig::Qwen25Vl(_) => Family::Qwen25Vl,
            FolderConfig::Qwen3Vl(_) => Family::Qwen3Vl,
            FolderConfig::Qwen35(_) => Family::Qwen35,
        }
    }
}

impl FolderConfig {
    fn architecture(&self) -> Architecture {
        match self {
            FolderConfig::Qwen25Vl(c) => c.architecture(),
            FolderConfig::Qwen3Vl(c) => c.architecture(),
            FolderConfig::Qwen35(c) => c.architecture(),
        }
    }

    /// The random-init model, seeded, on `device`.
    fn model(&self, device: Device, kind: Kind, seed: i64) -> Result<Box<dyn Model>, ModelError> {
        Ok(match self {
            FolderConfig::Qwen25Vl(c) => Box::new(Qwen25Vl::new(c, device, kind, seed)),
            FolderConfig::Qwen3Vl(c) => Box::new(Qwen3Vl::new(c, device, kind, seed)?),
            FolderConfig::Qwen35(c) => Box::new(Qwen35::new(c, device, kind, seed)?),
        })
    }
}

impl RandomFolder {
    /// The image processor: the tiny budget for the small shapes, and the family's patch size and
    /// normalization.
    fn image_processor(self) -> ImageProcessor {
        let default = ImageProcessor::default();
        match self {
            Self::Tiny | Self::Small => ImageProcessor {
                max_pixels: TINY_MAX_PIXELS,
                ..default
            },
            Self::Qwen3b | Self::Qwen7b => default,
            // The tiny budget keeps small images as they are (no 65,536-pixel floor).
            Self::Qwen3Tiny | Self::Qwen3Small | Self::Qwen35Tiny | Self::Qwen35Small => ImageProcessor {
                min_pixels: default.min_pixels,
                max_pixels: TINY_MAX_PIXELS,
                ..qwen3_vl_image_processor()
            },
            Self::Qwen3Vl2b | Self::Qwen3Vl4b | Self::Qwen3Vl8b | Self::Qwen35_4b => {
                qwen3_vl_image_processor()
            }
        }
    }
}

/// Writes the `tiny` preset into `dir` with weights drawn on the CPU (what most tests load).
pub fn write_tiny(dir: &Path, seed: i64, kind: Kind) -> Result<(), FolderError> {
    write_random(dir, RandomFolder::Tiny, seed, kind, Device::Cpu)
}

/// Writes `which` into `dir`: the random-init model (seeded, drawn on `device`: a GPU draws the
/// large shapes far faster than the CPU, but other values for the same seed), the tiny tokenizer,
/// our chat template and a preprocessor config.
pub fn write_random(
    dir: &Path,
    which: RandomFolder,
    seed: i64,
    kind: Kind,
    device: Device,
) -> Result<(), FolderError> {
    create_random(dir, which, seed, kind, device).map(drop)
}

/// [`write_random`], returning the folder's model and processor as [`load`] would read them back:
/// the model is the one drawn (its weights are what was written, in `kind`), so a 3B shape is not
/// read from disk again.
pub fn create_random(
    dir: &Path,
    which: RandomFolder,
    seed: i64,
    kind: Kind,
    device: Device,
) -> Result<HfModel, FolderError> {
    write_tiny_tokenizer(dir).map_err(ProcessorError::from)?;
    let model = which.config().model(device, kind, seed)?;
    model.save(dir)?;
    write_processor_files(dir, which)?;
    with_processor(dir, model, Processor::from_folder(dir)?)
}

/// The preprocessor config and chat template of a random folder (the tokenizer is written apart).
fn write_processor_files(dir: &Path, which: RandomFolder) -> Result<(), FolderError> {
    let image = which.image_processor();
    let path = dir.join(PREPROCESSOR_CONFIG_FILE);
    let json = image.to_json().map_err(ProcessorError::from)?;
    std::fs::write(&path, json).map_err(|e| io(&path, e))?;
    // transformers' processor (not its tokenizer) reads the template from this file, as released
    // checkpoints ship it; the tokenizer config carries the same text.
    let path = dir.join(CHAT_TEMPLATE_JINJA_FILE);
    std::fs::write(&path, QWEN2_5_VL_TEMPLATE).map_err(|e| io(&path, e))?;
    Ok(())
}

/// The tiny tokenizer's special ids.
pub fn tiny_ids() -> SpecialIds {
    use tiny_tokenizer::*;
    SpecialIds {
        endoftext: ENDOFTEXT_ID,
        im_start: IM_START_ID,
        im_end: IM_END_ID,
        vision_start: VISION_START_ID,
        vision_end: VISION_END_ID,
        image_pad: IMAGE_PAD_ID,
        video_pad: VIDEO_PAD_ID,
        eos: IM_END_ID,
        pad: ENDOFTEXT_ID,
    }
}

/// A random-init model of `which`'s shape with Qwen's vocabulary and special ids (for the 3B and 7B
/// shapes, the released models' config), seeded, on `device`: what benchmarks build, and what
/// [`write_weights`] writes.
pub fn random_model(
    which: RandomFolder,
    device: Device,
    kind: Kind,
    seed: i64,
) -> Result<Box<dyn Model>, ModelError> {
    which.released_config().model(device, kind, seed)
}

/// Writes only `config.json` and the weights of [`random_model`] into `dir`: a folder to put
/// Qwen's tokenizer (which cannot be shipped) beside. Returns the shape written.
pub fn write_weights(
    dir: &Path,
    which: RandomFolder,
    seed: i64,
    kind: Kind,
    device: Device,
) -> Result<Architecture, FolderError> {
    let model = random_model(which, device, kind, seed)?;
    model.save(dir)?;
    Ok(model.architecture())
}

#[cfg(test)]
mod tests {
    use tch::Tensor;

    use super::*;

    /// A generation config's `max_new_tokens`: absent or null is `None`; anything but an integer
    /// >= 1, or a file that is not a JSON object, is an error naming the file.
    #[test]
    fn the_generation_configs_token_limit_is_read_or_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(generation_max_new_tokens(dir.path()).unwrap(), None);
        let path = dir.path().join(GENERATION_CONFIG_FILE);
        let read = |text: &str| {
            std::fs::write(&path, text).unwrap();
            generation_max_new_tokens(dir.path()).map_err(|e| e.to_string())
        };
        assert_eq!(
            read(r#"{"max_new_tokens": 32, "do_sample": false}"#),
            Ok(Some(32))
        );
        assert_eq!(read(r#"{"max_new_tokens": null}"#), Ok(None));
        assert_eq!(read(r#"{"temperature": 0.7}"#), Ok(None));
        for bad in [
            r#"{"max_new_tokens": 0}"#,
            r#"{"max_new_tokens": 2.5}"#,
            "[1]",
            "{",
        ] {
            let err = read(bad).unwrap_err();
            assert!(err.starts_with(&path.display().to_string()), "{err}");
        }
    }

    #[test]
    fn every_preset_name_names_its_folder_and_an_unknown_one_lists_them() {
        for (name, folder) in NAMES {
            assert_eq!(RandomFolder::from_name(name), Ok(folder));
            assert_eq!(folder.name(), name);
        }
        let err = RandomFolder::from_name("qwen3-5b").unwrap_err();
        assert!(
            err.contains("\"qwen3-5b\"") && err.contains("qwen3-4b, qwen3-8b"),
            "{err}"
        );
    }

    #[test]
    fn the_qwen3_vl_shapes_are_the_released_models_with_their_processor() {
        let a = RandomFolder::Qwen3Vl4b.architecture();
        assert_eq!(a.family, Family::Qwen3Vl);
        assert_eq!(
            (a.hidden_size, a.layers, a.heads, a.kv_heads, a.head_dim),
            (2560, 36, 32, 8, 128)
        );
        assert!(a.tied_embeddings);
        let b = RandomFolder::Qwen3Vl8b.architecture();
        assert_eq!(
            (b.hidden_size, b.intermediate_size, b.vision_depth),
            (4096, 12288, 27)
        );
        assert!(!b.tied_embeddings);
        assert!(RandomFolder::Qwen3Vl2b.is_released_shape() && !RandomFolder::Qwen3Small.is_released_shape());
        let p = RandomFolder::Qwen3Vl4b.image_processor();
        assert_eq!(
            (p.min_pixels, p.max_pixels, p.patch_size),
            (65_536, 16_777_216, 16)
        );
        let small = RandomFolder::Qwen3Small.image_processor();
        assert_eq!(
            (small.max_pixels, small.patch_size, small.image_mean),
            (TINY_MAX_PIXELS, 16, [0.5; 3])
        );
        assert_eq!(small.min_pixels, ImageProcessor::default().min_pixels);
    }

    /// The model [`create_random`] returns is the folder it wrote, as [`load`] reads it back: every
    /// variable bit for bit (both families, bf16 as the GPU runs use it), and the same processor.
    #[test]
    fn a_created_folders_model_is_the_one_a_load_reads() {
        for which in [RandomFolder::Tiny, RandomFolder::Qwen3Tiny] {
            let dir = tempfile::tempdir().unwrap();
            let created = create_random(dir.path(), which, 3, Kind::BFloat16, Device::Cpu).unwrap();
            let loaded = load(dir.path(), Device::Cpu, Kind::BFloat16).unwrap();
            let variables = |m: &HfModel| {
                let mut v: Vec<(String, Tensor)> = m.model.var_store().variables().into_iter().collect();
                v.sort_by(|a, b| a.0.cmp(&b.0));
                v
            };
            let (a, b) = (variables(&created), variables(&loaded));
            assert_eq!(a.len(), b.len(), "{which:?}");
            assert!(a.len() > 20, "{which:?}: {}", a.len());
            for ((name, x), (other, y)) in a.iter().zip(&b) {
                assert_eq!(name, other);
                assert_eq!(x.kind(), Kind::BFloat16, "{name}");
                assert!(x.equal(y), "{which:?} {name}");
            }
            assert_eq!(created.processor.image, loaded.processor.image, "{which:?}");
            assert_eq!(
                created.processor.tokenizer.special_ids(),
                loaded.processor.tokenizer.special_ids()
            );
        }
    }
}
