//! From a chat with images to model inputs, as HF's Qwen2.5-VL and Qwen3-VL processors make them (the
//! image settings of the folder's preprocessor_config.json tell the two apart): the chat template
//! renders the conversation (one `<|image_pad|>` per image), each placeholder is expanded to the
//! image's merged-token count, the text is tokenized, and the images become patch rows.

pub mod chat_template;
pub mod image;
mod sample;
pub mod tiny_tokenizer;
pub mod tokenizer;
mod tool_turn;

use groundrl_core::data::image_file::ImageLimits;
use std::path::Path;

use ::image::DynamicImage;
use serde_json::Value;
use tch::Tensor;

use self::chat_template::{ChatTemplate, ChatTemplateError, RenderOptions};
use self::image::{ImageProcessor, ImageProcessorError};
use self::tokenizer::{Tokenizer, TokenizerError, expand_image_pads};
use crate::qwen2_5_vl::Batch;
use crate::qwen2_5_vl::rope_index::Grid;

pub use self::sample::ToolPrompt;

/// The preprocessor config file of an HF folder.
pub const PREPROCESSOR_CONFIG_FILE: &str = "preprocessor_config.json";

#[derive(Debug, thiserror::Error)]
pub enum ProcessorError {
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(transparent)]
    Template(#[from] ChatTemplateError),
    #[error(transparent)]
    Image(#[from] ImageProcessorError),
    #[error("{path}: {problem}")]
    File { path: String, problem: String },
    #[error("bad processor input: {0}")]
    Input(String),
}

/// One prompt, encoded.
#[derive(Debug, Default)]
pub struct Encoded {
    pub input_ids: Vec<i64>,
    /// (patches, 3 · temporal_patch_size · patch_size²) f32 on the CPU; `None` without images.
    pub pixel_values: Option<Tensor>,
    pub image_grids: Vec<Grid>,
}

/// Tokenizer, chat template and image processor of one model folder.
impl Encoded {
    /// A copy whose pixel tensor shares this one's memory (ids and grids are copied).
    pub fn share(&self) -> Self {
        self.share_pixels_if(true)
    }

    /// [`Self::share`] when `with_pixels`, else its ids and grids alone: for a forward whose image
    /// features are given, where concatenating a batch's pixel rows on the host would be wasted.
    pub fn share_pixels_if(&self, with_pixels: bool) -> Self {
        Self {
            input_ids: self.input_ids.clone(),
            pixel_values: self
                .pixel_values
                .as_ref()
                .filter(|_| with_pixels)
                .map(Tensor::shallow_clone),
            image_grids: self.image_grids.clone(),
        }
    }

    /// Appends `more`'s tokens, then its images after this one's (pixel rows and grids in order):
    /// a prompt followed by its response, or a response followed by a tool turn.
    pub fn append(&mut self, more: &Encoded) {
        self.input_ids.extend_from_slice(&more.input_ids);
        self.pixel_values = match (self.pixel_values.take(), &more.pixel_values) {
            (Some(a), Some(b)) => Some(Tensor::cat(&[&a, b], 0)),
            (a, b) => a.or_else(|| b.as_ref().map(Tensor::shallow_clone)),
        };
        self.image_grids.extend_from_slice(&more.image_grids);
    }
}

#[derive(Debug)]
pub struct Processor {
    pub tokenizer: Tokenizer,
    pub template: ChatTemplate,
    pub image: ImageProcessor,
    /// How sample images are read ([`Self::encode_sample`]): kept inside the sample file's folder
    /// and within a pixel budget unless set otherwise.
    pub files: ImageLimits,
}

impl Processor {
    /// Reads tokenizer.json / tokenizer_config.json, the chat template and preprocessor_config.json
    /// (HF's class defaults when that file is absent).
    pub fn from_folder(dir: &Path) -> Result<Self, ProcessorError> {
        let tokenizer = Tokenizer::from_folder(dir)?;
        let template =
            ChatTemplate::from_folder(dir)?.with_special_tokens(tokenizer.config().special_tokens_map());
        let path = dir.join(PREPROCESSOR_CONFIG_FILE);
        let image = match std::fs::read_to_string(&path) {
            Ok(text) => ImageProcessor::from_json(&text).map_err(|e| ProcessorError::File {
                path: path.display().to_string(),
                problem: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => ImageProcessor::default(),
            Err(e) => {
                return Err(ProcessorError::File {
                    path: path.display().to_string(),
                    problem: e.to_string(),
                });
            }
        };
        Ok(Self {
            tokenizer,
            template,
            image,
            files: ImageLimits::default(),
        })
    }

    /// Renders `messages` (HF-shaped JSON: role + content string or list of text/image items) and
    /// encodes it with `images`, one per image item, in order.
    pub fn encode_chat(
        &self,
        messages: &[Value],
        images: &[DynamicImage],
        options: &RenderOptions,
    ) -> Result<Encoded, ProcessorError> {
        let text = self.template.render(messages, options)?;
        self.encode_text(&text, images)
    }

    /// Encodes an already rendered prompt holding one `<|image_pad|>` per image.
    pub fn encode_text(&self, text: &str, images: &[DynamicImage]) -> Result<Encoded, ProcessorError> {
        let (pixel_values, image_grids, counts) = if images.is_empty() {
            (None, Vec::new(), Vec::new())
        } else {
            let processed = self.image.preprocess(images)?;
            (
                Some(processed.pixel_values),
                processed.image_grid_thw,
                processed.image_tokens,
            )
        };
        let expanded = expand_image_pads(text, &counts)?;
        let input_ids = self
            .tokenizer
            .encode(&expanded)?
            .into_iter()
            .map(i64::from)
            .collect();
        Ok(Encoded {
            input_ids,
            pixel_values,
            image_grids,
        })
    }

    /// Left-pads encoded prompts to one length with the pad token (generation appends on the right)
    /// and concatenates their images in row order.
    pub fn batch(&self, prompts: Vec<Encoded>) -> Batch {
        let pad = i64::from(self.tokenizer.special_ids().pad);
        let len = prompts.iter().map(|p| p.input_ids.len()).max().unwrap_or(0);
        let mut batch = Batch::default();
        let mut pixels = Vec::new();
        let mut any_padding = false;
        let mut mask = Vec::with_capacity(prompts.len());
        for prompt in prompts {
            let padding = len - prompt.input_ids.len();
            any_padding |= padding > 0;
            let mut row = vec![pad; padding];
            row.extend(prompt.input_ids);
            batch.input_ids.push(row);
            let mut m = vec![0; padding];
            m.resize(len, 1);
            mask.push(m);
            pixels.extend(prompt.pixel_values);
            batch.image_grids.extend(prompt.image_grids);
        }
        batch.attention_mask = any_padding.then_some(mask);
        batch.pixel_values = (!pixels.is_empty()).then(|| Tensor::cat(&pixels, 0));
        batch
    }
}
