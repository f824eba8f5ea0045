//! From a prediction line to an [`Answer`] in original image pixels.
//!
//! Completions go through the core parser and the reward module's frame resolution
//! ([`ScoringFrame::answer_frame`]), so evaluation and training read a model's numbers the same way:
//! the model's frame, unless the syntax implies one (Qwen-VL box tokens: 0-1000) or detection is on
//! and the numbers only fit another frame.

use super::hit::Answer;
use super::predictions::RawAnswer;
use crate::frame::{Frame, ImageFrames};
use crate::geometry::{BBox, Point};
use crate::parse::{self, parse_completion};
use crate::reward::Prediction;
use crate::reward::input::ScoringFrame;

/// Why a prediction gives no usable answer: a short stable name, one of the parser's reasons
/// ([`parse::ParseFailure::reason`]: `empty`, `no_answer`, `malformed`), `no_click` (an answer
/// without coordinates) or `out_of_frame` (numbers that fit no frame). Reports count failures by
/// it and evaluation files write it; no caller matches on it, so it is the name itself rather
/// than an enum.
pub type FailureReason = String;

/// How a prediction was read.
#[derive(Clone, Debug, PartialEq)]
pub enum Resolved {
    /// An answer, and the frame its numbers were read in (`None` for a refusal).
    Answer { answer: Answer, frame: Option<Frame> },
    /// No usable answer. Counted as wrong and reported as a parse failure.
    Failure(FailureReason),
}

/// Reads one prediction for an image of the given sizes.
pub fn resolve(raw: &RawAnswer, frames: ImageFrames, model_frame: Frame, detect_frame: bool) -> Resolved {
    let to_pixel = |p: Point, from: Frame| frames.convert_point(p, from, Frame::Pixel);
    match raw {
        RawAnswer::Completion(text) => resolve_completion(text, frames, model_frame, detect_frame),
        RawAnswer::Point { xy: [x, y], frame } => answer(to_pixel(Point::new(*x, *y), *frame), None, *frame),
        RawAnswer::Box { xyxy, frame } => {
            let bbox = frames.convert_box(BBox::from_xyxy(*xyxy), *frame, Frame::Pixel);
            answer(bbox.centre(), Some(bbox), *frame)
        }
        RawAnswer::Refusal => Resolved::Answer {
            answer: Answer::Refusal,
            frame: None,
        },
    }
}

fn answer(point: Point, bbox: Option<BBox>, frame: Frame) -> Resolved {
    Resolved::Answer {
        answer: Answer::Click { point, bbox },
        frame: Some(frame),
    }
}

/// The first click of a completion (ScreenSpot scores one click), and its first box if it gave
/// boxes.
fn resolve_completion(text: &str, frames: ImageFrames, model_frame: Frame, detect_frame: bool) -> Resolved {
    let (prediction, frame) = match read_completion(text, frames, model_frame, detect_frame) {
        Ok(read) => read,
        Err(reason) => return Resolved::Failure(reason),
    };
    match (prediction.first_click(), frame) {
        _ if prediction.no_objects => Resolved::Answer {
            answer: Answer::Refusal,
            frame: None,
        },
        (Some(point), Some(frame)) => answer(point, prediction.first_box().copied(), frame),
        _ => Resolved::Failure("no_click".into()),
    }
}

/// Everything a completion answers, in original pixels: its boxes (with their labels) and clicks in
/// listing order, or "None" (`no_objects`, with no frame), and the frame its numbers were read in.
/// `Err` holds the reason it gives no answer, named as [`Resolved::Failure`] names it.
pub fn read_completion(
    text: &str,
    frames: ImageFrames,
    model_frame: Frame,
    detect_frame: bool,
) -> Result<(Prediction, Option<Frame>), FailureReason> {
    let parsed = parse_completion(text).map_err(|failure| failure.reason().to_string())?;
    if parsed.answer == parse::Answer::NoObjects {
        let none = Prediction {
            boxes: Vec::new(),
            clicks: Vec::new(),
            no_objects: true,
        };
        return Ok((none, None));
    }
    let scoring = ScoringFrame {
        frames: Some(frames),
        frame: Frame::Pixel,
    };
    let frame = match scoring.answer_frame(&parsed, model_frame, detect_frame) {
        Ok(Some(frame)) => frame,
        Ok(None) => return Err("no_click".into()),
        Err(_) => return Err("out_of_frame".into()),
    };
    Ok((scoring.prediction(&parsed, frame), Some(frame)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::Size;

    /// 1000 x 500 original, resized to 500 x 250: resized numbers double.
    fn frames() -> ImageFrames {
        ImageFrames {
            original: Size::new(1000.0, 500.0),
            resized: Size::new(500.0, 250.0),
        }
    }

    fn click(resolved: Resolved) -> (Point, Option<BBox>, Option<Frame>) {
        match resolved {
            Resolved::Answer {
                answer: Answer::Click { point, bbox },
                frame,
            } => (point, bbox, frame),
            other => panic!("expected a click, got {other:?}"),
        }
    }

    #[test]
    fn completions_are_read_in_the_model_frame() {
        let (p, b, f) = click(resolve(
            &RawAnswer::Completion("(100, 50)".into()),
            frames(),
            Frame::Resized,
            false,
        ));
        assert_eq!((p, b, f), (Point::new(200.0, 100.0), None, Some(Frame::Resized)));
        let boxed = RawAnswer::Completion(r#"{"bbox_2d": [10, 20, 30, 40]}"#.into());
        let (p, b, _) = click(resolve(&boxed, frames(), Frame::Resized, false));
        assert_eq!(p, Point::new(40.0, 60.0));
        assert_eq!(b.unwrap().xyxy(), [20.0, 40.0, 60.0, 80.0]);
        let (p, _, f) = click(resolve(&boxed, frames(), Frame::Pixel, false));
        assert_eq!((p, f), (Point::new(20.0, 30.0), Some(Frame::Pixel)));
    }

    #[test]
    fn syntax_hints_and_detection_override_the_model_frame() {
        let qwen = RawAnswer::Completion("<|box_start|>(100,200),(300,400)<|box_end|>".into());
        let (p, _, f) = click(resolve(&qwen, frames(), Frame::Resized, false));
        assert_eq!((p, f), (Point::new(200.0, 150.0), Some(Frame::Qwen1000)));
        let normalized = RawAnswer::Completion("[0.5, 0.5]".into());
        let (p, _, f) = click(resolve(&normalized, frames(), Frame::Resized, true));
        assert_eq!((p, f), (Point::new(500.0, 250.0), Some(Frame::Normalized)));
        // Without detection the same numbers are read as resized pixels.
        let (p, _, _) = click(resolve(&normalized, frames(), Frame::Resized, false));
        assert_eq!(p, Point::new(1.0, 1.0));
        let too_big = RawAnswer::Completion("(5000, 10)".into());
        assert_eq!(
            resolve(&too_big, frames(), Frame::Resized, true),
            Resolved::Failure("out_of_frame".into())
        );
    }

    #[test]
    fn a_whole_answer_is_read_in_original_pixels_with_labels_and_its_frame() {
        let text =
            r#"[{"bbox_2d": [10, 20, 30, 40], "label": "dog"}, {"bbox_2d": [0, 0, 50, 50], "label": "cat"}]"#;
        let (prediction, frame) = read_completion(text, frames(), Frame::Resized, false).unwrap();
        assert_eq!(frame, Some(Frame::Resized));
        let boxes: Vec<_> = prediction
            .boxes
            .iter()
            .map(|b| (b.label.as_str(), b.bbox.xyxy()))
            .collect();
        assert_eq!(
            boxes,
            [
                ("dog", [20.0, 40.0, 60.0, 80.0]),
                ("cat", [0.0, 0.0, 100.0, 100.0])
            ]
        );
        assert_eq!(
            prediction.clicks,
            [Point::new(40.0, 60.0), Point::new(50.0, 50.0)]
        );
        let (none, frame) = read_completion("None", frames(), Frame::Resized, false).unwrap();
        assert!(none.no_objects && none.boxes.is_empty() && frame.is_none());
        assert_eq!(
            read_completion("", frames(), Frame::Resized, false).unwrap_err(),
            "empty"
        );
    }

    #[test]
    fn failures_and_refusals() {
        let r = |text: &str| {
            resolve(
                &RawAnswer::Completion(text.into()),
                frames(),
                Frame::Resized,
                false,
            )
        };
        assert_eq!(r(""), Resolved::Failure("empty".into()));
        assert_eq!(
            r("I would click the button."),
            Resolved::Failure("no_answer".into())
        );
        let typing =
            r#"<tool_call>{"name": "computer", "arguments": {"action": "type", "text": "hi"}}</tool_call>"#;
        assert_eq!(r(typing), Resolved::Failure("no_click".into()));
        let refusal = Resolved::Answer {
            answer: Answer::Refusal,
            frame: None,
        };
        assert_eq!(r("None"), refusal);
        // The parser reads an empty list as "no objects": an explicit refusal, too.
        assert_eq!(r("[]"), refusal);
        assert_eq!(
            resolve(&RawAnswer::Refusal, frames(), Frame::Resized, false),
            refusal
        );
    }

    #[test]
    fn parsed_lines_convert_from_their_frame() {
        let point = RawAnswer::Point {
            xy: [0.25, 0.5],
            frame: Frame::Normalized,
        };
        let (p, _, _) = click(resolve(&point, frames(), Frame::Resized, false));
        assert_eq!(p, Point::new(250.0, 250.0));
        let bbox = RawAnswer::Box {
            xyxy: [0.0, 0.0, 500.0, 500.0],
            frame: Frame::Qwen1000,
        };
        let (p, b, f) = click(resolve(&bbox, frames(), Frame::Resized, false));
        assert_eq!(
            (p, b.unwrap().xyxy(), f),
            (
                Point::new(250.0, 125.0),
                [0.0, 0.0, 500.0, 250.0],
                Some(Frame::Qwen1000)
            )
        );
    }
}
