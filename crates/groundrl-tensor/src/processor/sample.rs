//! A dataset sample as model input: its chat (its own prompt, or its task's default) with its images.

use std::path::Path;

use groundrl_core::data::image_file;
use groundrl_core::prompt::{PromptStyle, build_prompt};
use groundrl_score::data::{Content, Message, Sample};

use ::image::DynamicImage;
use serde_json::Value;

use super::chat_template::{RenderOptions, messages_to_json};
use super::{Encoded, Processor, ProcessorError};

/// What a tool-using prompt adds to a sample's chat: the tools' schemas, which the chat template
/// declares in the system turn, and an instruction appended to the last user turn.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolPrompt {
    pub schemas: Vec<Value>,
    pub instruction: String,
}

impl Processor {
    /// Encodes `sample` for generation (the chat ends with the assistant's turn opened). A sample
    /// without a prompt of its own is asked with `style` (usually [`PromptStyle::unprompted`] in the
    /// model's answer frame). Image paths are relative to `base`, the dataset file's folder, and read
    /// within [`Processor::files`].
    pub fn encode_sample(
        &self,
        sample: &Sample,
        base: &Path,
        style: &PromptStyle,
    ) -> Result<Encoded, ProcessorError> {
        self.encode_sample_with(sample, base, style, None)
            .map(|(encoded, _)| encoded)
    }

    /// [`Self::encode_sample`], with `tools` offered to the model when given; also returns the
    /// prompt's images as loaded, in prompt order (tools work on the originals).
    pub fn encode_sample_with(
        &self,
        sample: &Sample,
        base: &Path,
        style: &PromptStyle,
        tools: Option<&ToolPrompt>,
    ) -> Result<(Encoded, Vec<DynamicImage>), ProcessorError> {
        let mut messages = self.sample_messages(sample, style)?;
        let mut images = Vec::new();
        for content in messages.iter().flat_map(|m| &m.content) {
            if let Content::Image { image } = content {
                let reference = sample.images.get(*image).ok_or_else(|| {
                    ProcessorError::Input(format!(
                        "sample {}: prompt image {image} is not in `images`",
                        sample.id
                    ))
                })?;
                let decoded = image_file::open(base, &reference.path, self.files).map_err(|e| {
                    ProcessorError::Input(format!("sample {}: images[{image}]: {e}", sample.id))
                })?;
                images.push(decoded);
            }
        }
        if let Some(tools) = tools {
            let user = messages
                .iter_mut()
                .rev()
                .find(|m| m.role == "user")
                .ok_or_else(|| {
                    ProcessorError::Input(format!(
                        "sample {}: no user turn to add the tool instruction to",
                        sample.id
                    ))
                })?;
            user.content.push(Content::Text {
                text: format!("\n{}", tools.instruction),
            });
        }
        let options = RenderOptions {
            add_generation_prompt: true,
            tools: tools.map(|t| t.schemas.clone()),
            ..RenderOptions::default()
        };
        let encoded = self.encode_chat(&messages_to_json(&messages), &images, &options)?;
        Ok((encoded, images))
    }

    fn sample_messages(&self, sample: &Sample, style: &PromptStyle) -> Result<Vec<Message>, ProcessorError> {
        if !sample.prompt.is_empty() {
            return Ok(sample.prompt.clone());
        }
        build_prompt(sample, style).map_err(|e| ProcessorError::Input(e.to_string()))
    }
}
