//! One parser for what grounding and detection models emit (semantics.md §3).
//!
//! It never panics and never executes anything: model output is data. A completion that holds no
//! usable answer gives a [`ParseFailure`] with a reason, which callers count as a metric.

use serde::Serialize;

use crate::frame::Frame;

/// What the parser found in one completion.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Parsed {
    /// The answer itself.
    pub answer: Answer,
    /// Which syntax the answer was written in.
    pub syntax: Syntax,
    /// The frame the syntax implies, where it implies one (`<|box_start|>` boxes are on the 0-1000
    /// grid); `None` when the numbers alone cannot tell.
    pub frame_hint: Option<Frame>,
    /// A confidence the model stated, in [0, 1] (`<confidence>0.8</confidence>`, `"confidence": 80%`).
    pub confidence: Option<f64>,
    /// The tag structure, for format rewards.
    pub structure: Structure,
}

/// The answer of a completion.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Answer {
    /// One or more boxes `[x1, y1, x2, y2]`, in the order the model listed them.
    Boxes(Vec<RawBox>),
    /// One or more points `[x, y]`.
    Points(Vec<RawPoint>),
    /// An explicit "no such object" ("None"), which detection rewards score.
    NoObjects,
    /// A tool call (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`).
    ToolCall(ToolCall),
}

/// Box coordinates as the model wrote them, frame not yet resolved.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RawBox {
    pub coords: [f64; 4],
    pub label: Option<String>,
}

/// Point coordinates as the model wrote them, frame not yet resolved.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RawPoint {
    pub coords: [f64; 2],
    pub label: Option<String>,
}

/// A parsed tool call; `arguments` is the JSON object the model gave.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolCall {
    pub name: String,
    pub arguments: serde_json::Value,
}

/// Which syntax matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Syntax {
    /// Valid JSON (fenced or bare) with `bbox_2d` / `point_2d` / coordinate lists.
    Json,
    /// Almost-JSON that needed lenient repair (trailing commas, single quotes, unclosed brackets).
    RepairedJson,
    /// `<bbox>[x1,y1,x2,y2]</bbox>`.
    BboxTag,
    /// Qwen-VL `<|box_start|>(x1,y1),(x2,y2)<|box_end|>`.
    QwenBoxTokens,
    /// A bare list of numbers `[x1, y1, x2, y2]` or `[x, y]`.
    BareList,
    /// A point written `(x, y)`.
    Tuple,
    /// `<tool_call>` JSON.
    ToolCall,
    /// The word "None" (no objects).
    NoneWord,
}

/// The think/answer tag structure of a completion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Structure {
    pub has_think: bool,
    pub has_answer: bool,
    /// Exactly one `<think>...</think>` followed by one `<answer>...</answer>`, balanced.
    pub think_then_answer: bool,
}

/// Why a completion gave no usable answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "reason", content = "detail", rename_all = "snake_case")]
pub enum ParseFailure {
    #[error("empty completion")]
    Empty,
    #[error("no coordinates, box list or tool call found")]
    NoAnswer,
    #[error("malformed answer: {0}")]
    Malformed(String),
}

impl ParseFailure {
    /// A short stable name for counting failures by kind.
    pub fn reason(&self) -> &'static str {
        match self {
            ParseFailure::Empty => "empty",
            ParseFailure::NoAnswer => "no_answer",
            ParseFailure::Malformed(_) => "malformed",
        }
    }
}

/// Parses one completion.
pub fn parse_completion(text: &str) -> Result<Parsed, ParseFailure> {
    let _ = text;
    todo!("parser: see issue 2")
}
