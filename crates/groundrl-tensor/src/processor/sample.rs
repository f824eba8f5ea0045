//! A dataset sample as model input: its chat (its own prompt, or its task's default) with its images.

use std::path::Path;

use groundrl_core::data::{Content, Message, Sample};
use groundrl_core::frame::Frame;
use groundrl_core::prompt::{ModelKind, Preset, PromptStyle, Reasoning, build_prompt};

use super::chat_template::{RenderOptions, messages_to_json};
use super::{Encoded, Processor, ProcessorError};

impl Processor {
    /// Encodes `sample` for generation (the chat ends with the assistant's turn opened). Samples
    /// without a prompt are asked with `style`, or when `None` in their task's default instruct format
    /// (click point or OVD JSON list, answered in resized-image pixels). Image paths are relative to
    /// `base`, the dataset file's folder.
    pub fn encode_sample(
        &self,
        sample: &Sample,
        base: &Path,
        style: Option<&PromptStyle>,
    ) -> Result<Encoded, ProcessorError> {
        let messages = self.sample_messages(sample, style)?;
        let mut images = Vec::new();
        for content in messages.iter().flat_map(|m| &m.content) {
            if let Content::Image { image } = content {
                let reference = sample.images.get(*image).ok_or_else(|| {
                    ProcessorError::Input(format!(
                        "sample {}: prompt image {image} is not in `images`",
                        sample.id
                    ))
                })?;
                let path = base.join(&reference.path);
                images.push(::image::open(&path).map_err(|e| ProcessorError::File {
                    path: path.display().to_string(),
                    problem: e.to_string(),
                })?);
            }
        }
        let options = RenderOptions {
            add_generation_prompt: true,
            ..RenderOptions::default()
        };
        self.encode_chat(&messages_to_json(&messages), &images, &options)
    }

    fn sample_messages(
        &self,
        sample: &Sample,
        style: Option<&PromptStyle>,
    ) -> Result<Vec<Message>, ProcessorError> {
        if !sample.prompt.is_empty() {
            return Ok(sample.prompt.clone());
        }
        let default = PromptStyle {
            preset: Preset::for_task(sample.task),
            reasoning: Reasoning::None,
            model: ModelKind::Instruct,
            frame: Frame::Resized,
        };
        build_prompt(sample, style.unwrap_or(&default)).map_err(|e| ProcessorError::Input(e.to_string()))
    }
}
