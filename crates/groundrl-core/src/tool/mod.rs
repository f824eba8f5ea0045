//! Tools a model may call in the middle of its answer, and what a call returns.
//!
//! Arc Vision (the example proposed to verl in volcengine/verl pull request 2335) described a model that
//! zooms when unsure, but its tools were simulations never offered to the model. Here a tool is real code
//! behind a [`Tool`] trait: the rollout engine declares each tool's schema to the model through the chat
//! template's `<tools>` block, reads the model's `<tool_call>{"name": ..., "arguments": ...}` with the core
//! parser, runs the tool on the sample's original image and appends the reply (text, and for [`zoom`] a new
//! image) as a tool turn before the model continues.
//!
//! Model output is data: a malformed call, an unknown tool or a tool that refuses its arguments
//! gets an error message as the tool's reply ([`Toolbox::run`]), never a panic, and the outcome is
//! recorded ([`CallOutcome`]) for telemetry and for the gated reward.

pub mod answer;
pub mod view;
pub mod zoom;

use image::RgbImage;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use groundrl_score::frame::Frame;
use groundrl_score::parse::{ToolCall, tool_call_in};

pub use view::{AnswerView, View};
pub use zoom::{ZoomParams, ZoomTool};

/// What a tool sees besides its arguments: the sample's original image and the view the model
/// is answering about (the full image, or the last zoomed view).
#[derive(Clone, Copy, Debug)]
pub struct ToolContext<'a> {
    /// The original image, full resolution.
    pub image: &'a RgbImage,
    /// The view the call's coordinates refer to (the full image before any zoom).
    pub view: &'a View,
    /// The frame the model writes coordinates in (that of the prompt: `resized` for Qwen2.5-VL).
    pub model_frame: Frame,
}

/// A tool's reply, shown to the model as the tool turn.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolOutput {
    /// Text of the reply (after the image, when there is one).
    pub text: String,
    /// An image to show the model (a zoomed crop), placed before the text.
    pub image: Option<RgbImage>,
    /// The view that image shows: coordinates the model writes about it map back through it.
    pub view: Option<View>,
}

/// A tool the model may call.
pub trait Tool: Send + Sync {
    /// The name the model calls it by.
    fn name(&self) -> &str;

    /// Its declaration in the chat template's tool format:
    /// `{"type": "function", "function": {"name", "description", "parameters": JSON schema}}`.
    fn schema(&self) -> Value;

    /// Runs one call. `Err` is a message for the model (bad arguments, region off the image...):
    /// the model reads the words and telemetry counts the call as [`CallOutcome::Failed`] whatever
    /// they say, so a tool's refusals need no type of their own.
    fn call(&self, arguments: &Value, context: &ToolContext) -> Result<ToolOutput, String>;
}

/// How one call went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallOutcome {
    /// The tool ran and replied.
    Ok,
    /// The `<tool_call>` block was not a `{"name": ..., "arguments": {...}}` object.
    Malformed,
    /// No tool of that name is offered.
    UnknownTool,
    /// The tool refused the arguments.
    Failed,
    /// The call came after the last turn a sample may take: it was not run.
    TurnLimit,
}

impl CallOutcome {
    pub fn name(self) -> &'static str {
        match self {
            CallOutcome::Ok => "ok",
            CallOutcome::Malformed => "malformed",
            CallOutcome::UnknownTool => "unknown_tool",
            CallOutcome::Failed => "failed",
            CallOutcome::TurnLimit => "turn_limit",
        }
    }
}

/// One call as it was answered.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// The tool's name as the model wrote it (empty when the call was malformed).
    pub name: String,
    pub outcome: CallOutcome,
    pub output: ToolOutput,
}

/// The tools offered to a model.
#[derive(Default)]
pub struct Toolbox {
    tools: Vec<Box<dyn Tool>>,
}

impl std::fmt::Debug for Toolbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.tools.iter().map(|t| t.name()))
            .finish()
    }
}

impl Toolbox {
    pub fn new(tools: Vec<Box<dyn Tool>>) -> Self {
        Self { tools }
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Every tool's schema, for the chat template's `tools` variable.
    pub fn schemas(&self) -> Vec<Value> {
        self.tools.iter().map(|t| t.schema()).collect()
    }

    /// Whether a tool of this name is offered.
    pub fn offers(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t.name() == name)
    }

    /// Answers the first `<tool_call>` block of `turn` (the text of one assistant turn): `None` when
    /// the turn holds no such block. Errors become the reply's text.
    pub fn run(&self, turn: &str, context: &ToolContext) -> Option<Reply> {
        let call = tool_call_in(turn)?;
        Some(match call {
            Err(problem) => error_reply(
                "",
                CallOutcome::Malformed,
                format!("malformed tool call: {problem}"),
            ),
            Ok(call) => self.run_call(&call, context),
        })
    }

    fn run_call(&self, call: &ToolCall, context: &ToolContext) -> Reply {
        let Some(tool) = self.tools.iter().find(|t| t.name() == call.name) else {
            let offered: Vec<&str> = self.tools.iter().map(|t| t.name()).collect();
            return error_reply(
                &call.name,
                CallOutcome::UnknownTool,
                format!(
                    "unknown tool {:?}; the tools are: {}",
                    call.name,
                    offered.join(", ")
                ),
            );
        };
        match tool.call(&call.arguments, context) {
            Ok(output) => Reply {
                name: call.name.clone(),
                outcome: CallOutcome::Ok,
                output,
            },
            Err(problem) => error_reply(&call.name, CallOutcome::Failed, format!("error: {problem}")),
        }
    }
}

fn error_reply(name: &str, outcome: CallOutcome, text: String) -> Reply {
    Reply {
        name: name.to_string(),
        outcome,
        output: ToolOutput {
            text,
            image: None,
            view: None,
        },
    }
}
