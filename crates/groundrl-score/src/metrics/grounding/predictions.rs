//! The predictions file: one JSON object per line, keyed by sample id.
//!
//! Each line holds exactly one of:
//! - `{"id": "...", "completion": "raw model text"}`: parsed by [`crate::parse::parse_completion`]; the
//!   numbers' frame is the model's (`--model-frame`, Qwen2.5-VL: `resized`) unless the syntax implies
//!   one or frame detection is on;
//! - `{"id": "...", "point": [x, y], "frame": "pixel"}`: an already-parsed click;
//! - `{"id": "...", "box": [x1, y1, x2, y2], "frame": "pixel"}`: an already-parsed box, which clicks its
//!   centre;
//! - `{"id": "...", "refusal": true}`: an explicit refusal ("the element is not there");
//! - a held-out evaluation record, as `groundrl eval model --items` and a run's `eval/*.jsonl` write
//!   them: `completion` beside `point` (and `pred_box`) in original pixels, without `frame`. It is
//!   read by its answer in pixels (`pred_box` when there is one, else `point`), the answer its
//!   evaluation scored (after a tool call's zoom too, where the completion's numbers are about the
//!   zoomed view); by its completion when `point` is null (a refusal or a parse failure).
//!
//! `frame` is required with `point` and `box` (`pixel`, `resized`, `normalized`, `qwen1000`): a number
//! crossing a file boundary always says its frame. Other fields (prompt, scores, ...) are ignored, so
//! a generation script's output can be passed as it is. Blank lines are skipped.

use serde_json::{Map, Value};

use super::GroundingError;
use crate::frame::Frame;

/// One line of the predictions file.
#[derive(Clone, Debug, PartialEq)]
pub struct PredictionLine {
    /// The sample id it answers.
    pub id: String,
    /// 1-based line number in the file, for messages.
    pub line: usize,
    pub answer: RawAnswer,
}

/// What a prediction line says, before parsing and frame resolution.
#[derive(Clone, Debug, PartialEq)]
pub enum RawAnswer {
    Completion(String),
    Point { xy: [f64; 2], frame: Frame },
    Box { xyxy: [f64; 4], frame: Frame },
    Refusal,
}

/// Reads every line of a predictions file's text; the first bad line is an error naming its
/// number and field.
pub fn read_predictions(text: &str) -> Result<Vec<PredictionLine>, GroundingError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| read_line(l, i + 1))
        .collect()
}

fn read_line(text: &str, line: usize) -> Result<PredictionLine, GroundingError> {
    let bad = |field: &str, problem: String| GroundingError::Prediction {
        line,
        field: field.to_string(),
        problem,
    };
    let value: Value = serde_json::from_str(text).map_err(|e| bad("(line)", format!("not JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err(bad("(line)", "expected a JSON object".into()));
    };
    let id = match obj.get("id") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => return Err(bad("id", format!("expected a string, got {other}"))),
        None => return Err(bad("id", "missing".into())),
    };
    let answer = read_answer(&obj).map_err(|(field, problem)| bad(field, problem))?;
    Ok(PredictionLine { id, line, answer })
}

/// The answer fields of one line; `Err((field, problem))`.
fn read_answer(obj: &Map<String, Value>) -> Result<RawAnswer, (&'static str, String)> {
    if obj.contains_key("completion") && obj.contains_key("point") && !obj.contains_key("frame") {
        return evaluation_record(obj);
    }
    const KINDS: [&str; 4] = ["completion", "point", "box", "refusal"];
    let present: Vec<&str> = KINDS.into_iter().filter(|k| obj.contains_key(*k)).collect();
    let kind = match present[..] {
        [kind] => kind,
        [] => return Err(("(line)", "needs one of completion, point, box, refusal".into())),
        _ => {
            return Err((
                "(line)",
                format!("has {} together; give exactly one", present.join(", ")),
            ));
        }
    };
    let value = &obj[kind];
    match kind {
        "completion" => match value {
            Value::String(s) => Ok(RawAnswer::Completion(s.clone())),
            other => Err(("completion", format!("expected a string, got {other}"))),
        },
        "point" => Ok(RawAnswer::Point {
            xy: numbers(value).map_err(|p| ("point", p))?,
            frame: frame(obj)?,
        }),
        "box" => {
            let xyxy: [f64; 4] = numbers(value).map_err(|p| ("box", p))?;
            if !(xyxy[0] <= xyxy[2] && xyxy[1] <= xyxy[3]) {
                return Err((
                    "box",
                    format!("{xyxy:?} is not [x1, y1, x2, y2] with x1 <= x2, y1 <= y2"),
                ));
            }
            Ok(RawAnswer::Box {
                xyxy,
                frame: frame(obj)?,
            })
        }
        _ => match value {
            Value::Bool(true) => Ok(RawAnswer::Refusal),
            other => Err(("refusal", format!("expected true, got {other}"))),
        },
    }
}

/// The answer of a held-out evaluation record (see the module doc): its box or point in original
/// pixels, or its completion when it has neither.
fn evaluation_record(obj: &Map<String, Value>) -> Result<RawAnswer, (&'static str, String)> {
    match (obj.get("pred_box"), &obj["point"]) {
        (Some(b), _) if !b.is_null() => Ok(RawAnswer::Box {
            xyxy: numbers(b).map_err(|p| ("pred_box", p))?,
            frame: Frame::Pixel,
        }),
        (_, Value::Null) => match &obj["completion"] {
            Value::String(s) => Ok(RawAnswer::Completion(s.clone())),
            other => Err(("completion", format!("expected a string, got {other}"))),
        },
        (_, point) => Ok(RawAnswer::Point {
            xy: numbers(point).map_err(|p| ("point", p))?,
            frame: Frame::Pixel,
        }),
    }
}

/// `value` as `N` numbers; `Err` is the problem in words, filed under the field by [`read_answer`].
fn numbers<const N: usize>(value: &Value) -> Result<[f64; N], String> {
    let values: Option<Vec<f64>> = value
        .as_array()
        .and_then(|a| a.iter().map(Value::as_f64).collect());
    values
        .and_then(|v| v.try_into().ok())
        .ok_or_else(|| format!("expected a list of {N} numbers, got {value}"))
}

fn frame(obj: &Map<String, Value>) -> Result<Frame, (&'static str, String)> {
    match obj.get("frame") {
        Some(Value::String(s)) => s.parse().map_err(|e| ("frame", e)),
        Some(other) => Err(("frame", format!("expected a string, got {other}"))),
        None => Err(("frame", "missing: say which frame the numbers are in".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_kind_of_line() {
        let text = r#"{"id": "a", "completion": "(3, 4)", "prompt": "ignored"}

{"id": "b", "point": [1, 2.5], "frame": "normalized"}
{"id": "c", "box": [1, 2, 3, 4], "frame": "pixel"}
{"id": "d", "refusal": true}"#;
        let lines = read_predictions(text).unwrap();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0].answer, RawAnswer::Completion("(3, 4)".into()));
        assert_eq!(
            lines[1],
            PredictionLine {
                id: "b".into(),
                line: 3,
                answer: RawAnswer::Point {
                    xy: [1.0, 2.5],
                    frame: Frame::Normalized
                }
            }
        );
        assert_eq!(
            lines[2].answer,
            RawAnswer::Box {
                xyxy: [1.0, 2.0, 3.0, 4.0],
                frame: Frame::Pixel
            }
        );
        assert_eq!((lines[3].line, &lines[3].answer), (5, &RawAnswer::Refusal));
    }

    /// Evaluation records (`eval model --items`, `eval/after.jsonl`): read by their answer in pixels,
    /// or by their completion when they have none.
    #[test]
    fn reads_evaluation_records_by_their_answer_in_pixels() {
        let text = r#"{"id": "a", "completion": "(3, 4)", "point": [30.5, 40], "pred_box": null, "correct": true}
{"id": "b", "completion": "[1, 2, 5, 6]", "point": [3, 4], "pred_box": [10, 20, 50, 60]}
{"id": "c", "completion": "None", "point": null, "pred_box": null}"#;
        let answers: Vec<RawAnswer> = read_predictions(text)
            .unwrap()
            .into_iter()
            .map(|l| l.answer)
            .collect();
        assert_eq!(
            answers,
            [
                RawAnswer::Point {
                    xy: [30.5, 40.0],
                    frame: Frame::Pixel
                },
                RawAnswer::Box {
                    xyxy: [10.0, 20.0, 50.0, 60.0],
                    frame: Frame::Pixel
                },
                RawAnswer::Completion("None".into()),
            ]
        );
    }

    fn error(text: &str) -> (usize, String, String) {
        match read_predictions(text).unwrap_err() {
            GroundingError::Prediction { line, field, problem } => (line, field, problem),
            other => panic!("unexpected {other}"),
        }
    }

    #[test]
    fn bad_lines_name_line_and_field() {
        let ok = r#"{"id": "a", "refusal": true}"#;
        assert_eq!(error(&format!("{ok}\n{{not json")).0, 2);
        assert_eq!(error("[1, 2]").1, "(line)");
        assert_eq!(error(r#"{"completion": "x"}"#).1, "id");
        assert_eq!(error(r#"{"id": 7, "completion": "x"}"#).1, "id");
        assert_eq!(error(r#"{"id": "a"}"#).1, "(line)");
        let (_, field, problem) =
            error(r#"{"id": "a", "completion": "x", "point": [1, 2], "frame": "pixel"}"#);
        assert_eq!(field, "(line)");
        assert!(problem.contains("completion, point"), "{problem}");
        assert_eq!(
            error(r#"{"id": "a", "completion": "x", "point": [1, "2"]}"#).1,
            "point"
        );
        assert_eq!(error(r#"{"id": "a", "point": [1, 2]}"#).1, "frame");
        assert!(
            error(r#"{"id": "a", "point": [1, 2], "frame": "pixels"}"#)
                .2
                .contains("pixels")
        );
        assert_eq!(
            error(r#"{"id": "a", "point": [1, 2, 3], "frame": "pixel"}"#).1,
            "point"
        );
        assert_eq!(
            error(r#"{"id": "a", "point": ["1", 2], "frame": "pixel"}"#).1,
            "point"
        );
        assert_eq!(
            error(r#"{"id": "a", "box": [5, 0, 1, 1], "frame": "pixel"}"#).1,
            "box"
        );
        assert_eq!(error(r#"{"id": "a", "refusal": false}"#).1, "refusal");
        assert_eq!(error(r#"{"id": "a", "completion": null}"#).1, "completion");
    }
}
