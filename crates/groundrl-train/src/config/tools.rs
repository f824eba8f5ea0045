//! `[tools]`: tools the model may call in the middle of its answer (the zoom tool with the
//! confidence-gated reward), and the limits of a tool-using rollout.
//!
//! ```toml
//! [tools]
//! enabled = ["zoom"]
//! max_turns = 3            # two zooms, then the answer
//! warm_up_zoom_below = 0.05
//! ```
//!
//! With `enabled` empty (the default) the model is offered no tool and every other key is unused.

use groundrl_core::tool::zoom::ZOOM;
use groundrl_core::tool::{AnswerView, Tool, Toolbox, ZoomParams, ZoomTool};
use groundrl_score::resize::{FACTOR, PixelBudget};
use serde::{Deserialize, Serialize};

use super::{ConfigError, ensure};

/// The tools a config may name.
pub const KNOWN_TOOLS: [&str; 1] = [ZOOM];

/// Tokens of a tool turn besides its image: the template's wrapping (end of the assistant turn,
/// `<tool_response>` tags, start of the next assistant turn) and the reply's text, error messages
/// included. Used only for the default token budget.
const TOOL_TURN_TEXT_TOKENS: u64 = 64;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    /// Names of the tools offered to the model; known: `zoom`. Default empty: no tools.
    pub enabled: Vec<String>,
    /// Most assistant turns of one sample (each but the last may end in a tool call; a call in the
    /// last turn is not run). Default 3: two zooms, then an answer.
    pub max_turns: u32,
    /// Most tokens after the prompt of one sample, the model's turns and the tool turns (with their
    /// images) together; at least `rollout.max_new_tokens`. Default 0: room for every turn at
    /// `rollout.max_new_tokens` and for every tool turn to hold an image as large as the model's pixel
    /// budget allows (see [`ToolsConfig::total_token_budget`]).
    pub max_total_tokens: u32,
    /// Largest enlargement factor of a zoom, 1 to 8. Default 4.
    pub max_zoom: u32,
    /// What the final answer's coordinates are about after a zoom: `full` (the whole screenshot) or
    /// `last` (the last image shown). Default `full`.
    pub answer_view: AnswerView,
    /// Supervised warm-up: a target whose bounding box's smaller side is below this share of the
    /// image's smaller side gets a reference trajectory that zooms before answering, so the model
    /// sees how a call is written. In [0, 1); default 0: never.
    pub warm_up_zoom_below: f64,
    /// The zoom region of those reference trajectories, in target sizes (width and height of the
    /// region over the target's); at least 1. Default 4.
    pub warm_up_zoom_context: f64,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            enabled: Vec::new(),
            max_turns: 3,
            max_total_tokens: 0,
            max_zoom: 4,
            answer_view: AnswerView::Full,
            warm_up_zoom_below: 0.0,
            warm_up_zoom_context: 4.0,
        }
    }
}

impl ToolsConfig {
    /// Whether any tool is offered.
    pub fn is_on(&self) -> bool {
        !self.enabled.is_empty()
    }

    /// The per-sample token budget after the prompt: `max_total_tokens`, or when 0,
    /// `max_turns * max_new_tokens + (max_turns - 1) * (max_pixels / 28² + 64)`: each turn at the
    /// length limit, and each tool turn with one image of the largest size the processor keeps (one
    /// token per 28 x 28 pixels) and 64 tokens of text.
    pub fn total_token_budget(&self, max_new_tokens: u32, max_pixels: u64) -> u64 {
        if self.max_total_tokens > 0 {
            return u64::from(self.max_total_tokens);
        }
        let turns = u64::from(self.max_turns);
        let image_tokens = max_pixels / u64::from(FACTOR * FACTOR);
        turns * u64::from(max_new_tokens) + turns.saturating_sub(1) * (image_tokens + TOOL_TURN_TEXT_TOKENS)
    }

    /// The enabled tools; `budget` is the processor's pixel budget (a zoom stays within it). Names
    /// `TrainConfig::validate` refuses are left out.
    pub fn toolbox(&self, budget: PixelBudget) -> Toolbox {
        let tools = self
            .enabled
            .iter()
            .filter_map(|name| match name.as_str() {
                ZOOM => Some(Box::new(ZoomTool::new(ZoomParams {
                    max_zoom: self.max_zoom,
                    budget,
                })) as Box<dyn Tool>),
                _ => None,
            })
            .collect();
        Toolbox::new(tools)
    }

    /// Checks names and ranges; `max_new_tokens` is `rollout.max_new_tokens`.
    pub(super) fn validate(&self, max_new_tokens: u32) -> Result<(), ConfigError> {
        for (i, name) in self.enabled.iter().enumerate() {
            ensure(
                KNOWN_TOOLS.contains(&name.as_str()),
                "tools.enabled",
                format!("{name:?} is not a tool; known: {}", KNOWN_TOOLS.join(", ")),
            )?;
            ensure(
                !self.enabled[..i].contains(name),
                "tools.enabled",
                format!("{name:?} is listed twice"),
            )?;
        }
        ensure(
            self.max_turns >= 1,
            "tools.max_turns",
            "must be at least 1, found 0",
        )?;
        if self.is_on() {
            ensure(
                self.max_turns >= 2,
                "tools.max_turns",
                "must be at least 2 with tools enabled (a call in the last turn is never run), found 1",
            )?;
        }
        ensure(
            self.max_total_tokens == 0 || self.max_total_tokens >= max_new_tokens,
            "tools.max_total_tokens",
            format!(
                "{} is below rollout.max_new_tokens {max_new_tokens} (0 = the default budget)",
                self.max_total_tokens
            ),
        )?;
        ensure(
            (1..=8).contains(&self.max_zoom),
            "tools.max_zoom",
            format!("must be 1 to 8, found {}", self.max_zoom),
        )?;
        ensure(
            (0.0..1.0).contains(&self.warm_up_zoom_below),
            "tools.warm_up_zoom_below",
            format!("must be in [0, 1), found {}", self.warm_up_zoom_below),
        )?;
        if self.warm_up_zoom_below > 0.0 {
            ensure(
                self.enabled.iter().any(|name| name == ZOOM),
                "tools.warm_up_zoom_below",
                "needs \"zoom\" in tools.enabled (the reference trajectories call it)",
            )?;
        }
        ensure(
            self.warm_up_zoom_context.is_finite() && self.warm_up_zoom_context >= 1.0,
            "tools.warm_up_zoom_context",
            format!("must be at least 1, found {}", self.warm_up_zoom_context),
        )
    }
}
