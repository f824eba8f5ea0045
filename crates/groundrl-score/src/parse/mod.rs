//! One parser for what grounding and detection models emit (docs/design.md, "Parsing").
//!
//! It never panics and never executes anything: model output is data. A completion that holds no
//! usable answer gives a [`ParseFailure`] with a reason, which callers count as a metric.
//!
//! ```
//! use groundrl_score::parse::{parse_completion, Answer, Syntax};
//!
//! let text = "<think>The chair is left.</think><answer>```json\n\
//!             [{\"bbox_2d\": [38, 95, 113, 164], \"label\": \"chair\"}]\n```</answer>";
//! let parsed = parse_completion(text).unwrap();
//! assert_eq!(parsed.syntax, Syntax::Json);
//! assert!(parsed.structure.think_then_answer);
//! let Answer::Boxes(boxes) = parsed.answer else { panic!("boxes expected") };
//! assert_eq!(boxes[0].coords, [38.0, 95.0, 113.0, 164.0]);
//! ```
//!
//! Where the answer is read from: the last `<answer>` block, else what follows `</think>`, else the
//! whole completion. Syntaxes are tried from the most explicit to the most lenient (see
//! [`parse_completion`]); coordinates are returned as written, and resolving their frame is the
//! caller's job ([`crate::frame::ImageFrames::detect`]), helped by [`Parsed::frame_hint`].

mod confidence;
mod cursor;
mod json;
mod plain;
mod repair;
mod structure;
mod tags;

#[cfg(test)]
mod tests;

use serde::Serialize;

use crate::frame::Frame;
use crate::geometry::BBox;

pub use structure::parse_structure;

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

impl Parsed {
    /// The boxes of the answer; empty unless the answer is boxes.
    pub fn boxes(&self) -> &[RawBox] {
        match &self.answer {
            Answer::Boxes(boxes) => boxes,
            _ => &[],
        }
    }

    /// Where the answer clicks, in the answer's own frame: points as written, each box's centre
    /// (ScreenSpot's convention), a tool call's `coordinate`; none for "no objects".
    pub fn click_points(&self) -> Vec<[f64; 2]> {
        match &self.answer {
            Answer::Boxes(boxes) => boxes
                .iter()
                .map(|b| {
                    let centre = BBox::from_xyxy(b.coords).centre();
                    [centre.x, centre.y]
                })
                .collect(),
            Answer::Points(points) => points.iter().map(|p| p.coords).collect(),
            Answer::NoObjects => Vec::new(),
            Answer::ToolCall(call) => call.coordinate().map(|p| p.coords).into_iter().collect(),
        }
    }
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

impl ToolCall {
    /// The `coordinate` argument `[x, y]` of GUI-agent calls (`{"action": "left_click", "coordinate":
    /// [x, y]}`), which ScreenSpot-style evaluation takes as the click.
    pub fn coordinate(&self) -> Option<RawPoint> {
        let values = self.arguments.get("coordinate")?.as_array()?;
        match values
            .iter()
            .map(serde_json::Value::as_f64)
            .collect::<Option<Vec<_>>>()?[..]
        {
            [x, y] => Some(RawPoint {
                coords: [x, y],
                label: None,
            }),
            _ => None,
        }
    }
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
///
/// Syntaxes, in the order tried on the answer region:
/// 1. the word "None" alone: [`Answer::NoObjects`];
/// 2. tags, which decide the answer once present (a malformed tag is [`ParseFailure::Malformed`]):
///    `<tool_call>`, Qwen `<|box_start|>` tokens, `<bbox>`;
/// 3. lenient fallbacks, where the first that reads wins: JSON (fenced, then bracketed spans, each
///    strict then repaired; a flat number list outside a fence is a [`Syntax::BareList`]), then
///    `(x, y)` points. If none reads, the first fallback's error is reported, else
///    [`ParseFailure::NoAnswer`].
///
/// The confidence is looked for in the whole completion, since models state it outside the answer.
pub fn parse_completion(text: &str) -> Result<Parsed, ParseFailure> {
    let text = structure::strip_end_tokens(text);
    if text.trim().is_empty() {
        return Err(ParseFailure::Empty);
    }
    let (answer, syntax) = read_answer(structure::answer_region(text))?;
    Ok(Parsed {
        answer,
        syntax,
        frame_hint: (syntax == Syntax::QwenBoxTokens).then_some(Frame::Qwen1000),
        confidence: confidence::stated_confidence(text),
        structure: parse_structure(text),
    })
}

/// The confidence `text` states (its last statement, in [0, 1]), whether or not the text holds a
/// readable answer. [`parse_completion`] gives it only with an answer; a calibration reward that read
/// it only then would let a completion change its score by spoiling or repairing its answer (seed
/// 001 §2.2B; the gated tool reward's tests found it).
pub fn confidence_in(text: &str) -> Option<f64> {
    confidence::stated_confidence(structure::strip_end_tokens(text))
}

/// The first `<tool_call>` block anywhere in `text`: `None` when there is none, else the call or
/// why it is malformed (in words, which the toolbox shows the model as its reply: no caller
/// matches on them). The rollout engine runs it; [`parse_completion`] reads it as an answer.
pub fn tool_call_in(text: &str) -> Option<Result<ToolCall, String>> {
    match tags::tool_call(text) {
        Attempt::Absent => None,
        Attempt::Found(Answer::ToolCall(call), _) => Some(Ok(call)),
        Attempt::Found(..) => None,
        Attempt::Invalid(reason) => Some(Err(reason)),
    }
}

/// The outcome of looking for one syntax in the answer region.
#[derive(Debug)]
enum Attempt {
    /// The syntax does not occur.
    Absent,
    Found(Answer, Syntax),
    /// The syntax occurs but does not hold a valid answer; the reason names what is wrong, in words
    /// for whoever reads the failure: it becomes [`ParseFailure::Malformed`]'s detail, or the reply
    /// to a malformed tool call. Failures are counted by kind ([`ParseFailure::reason`]), never by
    /// this text, which quotes what the model wrote; so it is a `String`, not a closed set of cases.
    Invalid(String),
}

fn read_answer(region: &str) -> Result<(Answer, Syntax), ParseFailure> {
    if plain::is_none_word(region) {
        return Ok((Answer::NoObjects, Syntax::NoneWord));
    }
    let tagged: [fn(&str) -> Attempt; 3] = [tags::tool_call, tags::qwen_boxes, tags::bbox_tags];
    for read in tagged {
        match read(region) {
            Attempt::Absent => {}
            Attempt::Found(answer, syntax) => return Ok((answer, syntax)),
            Attempt::Invalid(reason) => return Err(ParseFailure::Malformed(reason)),
        }
    }
    let lenient: [fn(&str) -> Attempt; 2] = [json::json_answer, plain::tuple_points];
    let mut first_error = None;
    for read in lenient {
        match read(region) {
            Attempt::Absent => {}
            Attempt::Found(answer, syntax) => return Ok((answer, syntax)),
            Attempt::Invalid(reason) => {
                first_error.get_or_insert(reason);
            }
        }
    }
    Err(first_error.map_or(ParseFailure::NoAnswer, ParseFailure::Malformed))
}
