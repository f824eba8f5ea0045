//! Chat prompts for samples, rendered from the minijinja templates in [`presets`].
//!
//! A prompt says what to find, the answer format, the coordinate frame to answer in (Qwen2.5-VL answers
//! in pixels of the resized image it sees; Qwen2-VL and Qwen3-VL on a 0-1000 grid: docs/design.md),
//! and optionally the think/answer form. Format instructions go in the user turn for instruct models
//! and in the system prompt for base models (MM-Eureka, arXiv 2503.07365, and VLM-R1's OVD
//! write-up: an instruct model keeps its built-in system prompt; format text there barely moved its
//! format reward). With tools on,
//! [`tools::tool_instruction`] is added to the user turn.
//!
//! ```
//! use groundrl_core::prompt::{ModelKind, Preset, PromptStyle, Reasoning};
//! use groundrl_score::frame::Frame;
//! let style = PromptStyle { preset: Preset::Point, reasoning: Reasoning::None, model: ModelKind::Instruct, frame: Frame::Resized };
//! assert_eq!(style.preset.answer_format(), "point");
//! ```

pub mod answer;
pub mod presets;
pub mod tools;

use std::sync::LazyLock;

use minijinja::{Environment, UndefinedBehavior, context};
use serde_json::json;

use groundrl_score::data::{Content, Message, Sample, Task};
use groundrl_score::frame::Frame;

/// The answer format a prompt asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    /// A click point `(x, y)`.
    Point,
    /// One box `[x1, y1, x2, y2]`.
    Box,
    /// A JSON list of `{"bbox_2d": [...], "label": ...}` or `None` (VLM-R1's OVD prompt).
    OvdJson,
}

impl Preset {
    /// The name stored in sample metadata as `answer_format` (checked by `data lint`).
    pub fn answer_format(self) -> &'static str {
        match self {
            Preset::Point => "point",
            Preset::Box => "box",
            Preset::OvdJson => "json_list",
        }
    }

    /// The format a task is naturally answered in: a click point, one box, or the OVD JSON list.
    pub fn for_task(task: Task) -> Preset {
        match task {
            Task::PointGrounding => Preset::Point,
            Task::BoxGrounding | Task::ReferringExpression => Preset::Box,
            Task::Detection => Preset::OvdJson,
        }
    }

    fn template(self) -> &'static str {
        match self {
            Preset::Point => "format/point",
            Preset::Box => "format/box",
            Preset::OvdJson => "format/ovd_json",
        }
    }
}

/// Whether the model is asked to think before answering, and in which words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reasoning {
    None,
    Standard,
    Enhanced,
}

impl Reasoning {
    pub fn name(self) -> &'static str {
        match self {
            Reasoning::None => "none",
            Reasoning::Standard => "standard",
            Reasoning::Enhanced => "enhanced",
        }
    }
}

/// Where format instructions go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelKind {
    /// In the user turn; the model's built-in system prompt is kept.
    Instruct,
    /// In a system prompt.
    Base,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromptStyle {
    pub preset: Preset,
    pub reasoning: Reasoning,
    pub model: ModelKind,
    /// The frame the model must answer in.
    pub frame: Frame,
}

impl PromptStyle {
    /// The style for `task` with this style's reasoning, model kind and frame: datasets that mix
    /// tasks (the synthetic generator's) ask each sample in its own format.
    pub fn for_task(&self, task: Task) -> PromptStyle {
        PromptStyle {
            preset: Preset::for_task(task),
            ..*self
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error("sample {id}: {source}")]
    Template { id: String, source: minijinja::Error },
    #[error("sample {id}: has no image to show")]
    NoImage { id: String },
}

static ENV: LazyLock<Environment<'static>> = LazyLock::new(|| {
    let mut env = Environment::new();
    // A variable the code forgot to pass is an error, never an empty string in a training prompt.
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    for (name, source) in presets::TEMPLATES {
        env.add_template(name, source)
            .expect("the preset templates parse");
    }
    env
});

/// How the prompt names the answer's frame, completing "Answer with the click point (x, y) ...".
pub fn frame_phrase(frame: Frame, width: u32, height: u32) -> String {
    match frame {
        Frame::Pixel => format!("in pixels of the original {width}x{height} image"),
        Frame::Resized => "in pixels of the image as you see it".to_string(),
        Frame::Normalized => "as fractions from 0 to 1 of the image width and height".to_string(),
        Frame::Qwen1000 => "on a 0 to 1000 scale of the image width and height".to_string(),
    }
}

/// The prompt messages for `sample` in `style`.
pub fn build_prompt(sample: &Sample, style: &PromptStyle) -> Result<Vec<Message>, PromptError> {
    let id = || sample.id.clone();
    let image = sample
        .images
        .first()
        .ok_or_else(|| PromptError::NoImage { id: id() })?;
    let render = |name: &str, ctx| {
        ENV.get_template(name)
            .and_then(|t| t.render(ctx))
            .map_err(|source| PromptError::Template { id: id(), source })
    };
    let task = match style.preset {
        Preset::OvdJson => render("task/ovd", context! { targets => ovd_targets(sample) })?,
        _ => render(
            "task/grounding",
            context! { instruction => as_sentence(&sample.instruction) },
        )?,
    };
    let mut format = vec![render(
        style.preset.template(),
        context! { frame => frame_phrase(style.frame, image.width, image.height) },
    )?];
    match style.reasoning {
        Reasoning::None => {}
        Reasoning::Standard => format.push(render("reasoning/standard", context! {})?),
        Reasoning::Enhanced => format.push(render("reasoning/enhanced", context! {})?),
    }
    let image_part = Content::Image { image: 0 };
    let text = |parts: Vec<String>| Content::Text {
        text: parts.join(" "),
    };
    Ok(match style.model {
        ModelKind::Instruct => {
            let mut parts = vec![task];
            parts.extend(format);
            vec![Message {
                role: "user".into(),
                content: vec![image_part, text(parts)],
            }]
        }
        ModelKind::Base => vec![
            Message {
                role: "system".into(),
                content: vec![text(format)],
            },
            Message {
                role: "user".into(),
                content: vec![image_part, text(vec![task])],
            },
        ],
    })
}

/// Fills `sample.prompt` and records the expected answer in metadata (`answer_format`,
/// `answer_frame`, `reasoning`) so rewards and `data lint` know what was asked.
pub fn apply(sample: &mut Sample, style: &PromptStyle) -> Result<(), PromptError> {
    sample.prompt = build_prompt(sample, style)?;
    let meta = &mut sample.metadata;
    meta.insert("answer_format".into(), json!(style.preset.answer_format()));
    meta.insert("answer_frame".into(), json!(style.frame.name()));
    meta.insert("reasoning".into(), json!(style.reasoning.name()));
    Ok(())
}

/// The instruction ending in sentence punctuation, so the next sentence starts cleanly.
fn as_sentence(instruction: &str) -> String {
    let trimmed = instruction.trim();
    if trimmed.ends_with(['.', '?', '!']) {
        trimmed.to_string()
    } else {
        format!("{trimmed}.")
    }
}

/// The OVD prompt's target list: the targets' distinct labels in order, else the instruction.
fn ovd_targets(sample: &Sample) -> String {
    let mut labels: Vec<&str> = Vec::new();
    for label in sample.targets.iter().filter_map(|t| t.label.as_deref()) {
        if !labels.contains(&label) {
            labels.push(label);
        }
    }
    if labels.is_empty() {
        sample.instruction.trim().trim_end_matches('.').to_string()
    } else {
        labels.join("; ")
    }
}
