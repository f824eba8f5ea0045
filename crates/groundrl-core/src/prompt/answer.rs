//! The reference answer of a sample: the text a model that got it right would write, in the answer
//! format and frame its prompt asked for. Supervised warm-up trains on it.
//!
//! The format and frame are read from the metadata [`super::apply`] records (`answer_format`,
//! `answer_frame`, `reasoning`); a sample without them is asked in its task's default (click point
//! or box or OVD JSON list) in the frame of the model asked ([`super::PromptStyle::unprompted`]),
//! which each function here takes as `model_frame`. Pixel-like
//! frames get integers, as models write them; normalized coordinates get three decimals.
//!
//! With tools on, a reference trajectory is a turn that states a low confidence and zooms on the
//! target ([`reference_zoom_call`]), the zoom tool's real reply, and the answer about the view the
//! prompt says answers are about, with its confidence ([`reference_answer_in_view`]); a trajectory
//! without a zoom is that last turn alone, about the full view.

use serde_json::{Value, json};

use super::Preset;
use crate::tool::View;
use crate::tool::zoom::ZOOM;
use groundrl_score::data::{Sample, Target, Task};
use groundrl_score::frame::{Frame, ImageFrames, Size};
use groundrl_score::geometry::{BBox, Point};
use groundrl_score::resize::FACTOR;

/// Smallest side of a reference zoom region, in resized pixels: one 28-pixel patch group, so a
/// tiny or point target is shown with some of its surroundings while the zoom still shows a small
/// region (a quarter of the side of a 112-pixel view) in more detail.
const MIN_ZOOM_SIDE: f64 = FACTOR as f64;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AnswerError {
    #[error("sample {id}: metadata `{field}` is {value}: {problem}")]
    Metadata {
        id: String,
        field: &'static str,
        value: String,
        problem: String,
    },
    #[error(
        "sample {id}: asks for reasoning before the answer; reference answers have no reasoning to write"
    )]
    Reasoning { id: String },
    #[error("sample {id}: has no target to answer with")]
    NoTarget { id: String },
    #[error("confidence {value} is not in [0, 1]")]
    Confidence { value: f64 },
    #[error("zoom context {value} must be at least 1 (the region holds the whole target)")]
    ZoomContext { value: f64 },
}

/// The reference answer of `sample`, whose image has the sizes `frames`.
pub fn reference_answer(
    sample: &Sample,
    frames: ImageFrames,
    model_frame: Frame,
) -> Result<String, AnswerError> {
    let (preset, frame) = asked(sample, model_frame)?;
    write_answer(sample, preset, frame, |p| {
        frames.convert_point(p, sample.frame, frame)
    })
}

/// The reference answer of `sample` with its coordinates about `view` (a zoom of the image whose
/// sizes are `frames`, or `View::full(frames)`, which gives the text of [`reference_answer`]),
/// followed by `\n<confidence>c</confidence>`: the last turn of a reference trajectory.
/// Coordinates of a target outside the view are written as they fall (negative, or beyond the
/// view's size).
pub fn reference_answer_in_view(
    sample: &Sample,
    frames: ImageFrames,
    model_frame: Frame,
    view: &View,
    confidence: f64,
) -> Result<String, AnswerError> {
    let (preset, frame) = asked(sample, model_frame)?;
    let confidence = confidence_text(confidence)?;
    let full = View::full(frames);
    let answer = write_answer(sample, preset, frame, |p| {
        if *view == full {
            frames.convert_point(p, sample.frame, frame)
        } else {
            view.from_original(frames.convert_point(p, sample.frame, Frame::Pixel), frame)
        }
    })?;
    Ok(format!("{answer}\n<confidence>{confidence}</confidence>"))
}

/// The first turn of a reference trajectory that zooms: `<confidence>c</confidence>` then a zoom
/// call written as the Qwen2.5-VL chat template writes tool calls. The region is the first target's
/// bounding box grown to `context` times its width and height around its centre (at least
/// [`MIN_ZOOM_SIDE`] resized pixels a side), clipped to the image, in the frame the prompt asked
/// for, rounded outwards to the precision answers are written with.
pub fn reference_zoom_call(
    sample: &Sample,
    frames: ImageFrames,
    model_frame: Frame,
    confidence: f64,
    context: f64,
) -> Result<String, AnswerError> {
    let (_, frame) = asked(sample, model_frame)?;
    let confidence = confidence_text(confidence)?;
    if !(context.is_finite() && context >= 1.0) {
        return Err(AnswerError::ZoomContext { value: context });
    }
    let target = first_target(sample)?;
    let region = zoom_region(target.shape.bounding_box(), sample.frame, frames, context);
    let r = frames.convert_box(region, Frame::Resized, frame);
    let extent = frames.extent(frame);
    let corners = [
        written_outwards(r.x1, frame, false).max(0.0),
        written_outwards(r.y1, frame, false).max(0.0),
        written_outwards(r.x2, frame, true).min(extent.width),
        written_outwards(r.y2, frame, true).min(extent.height),
    ];
    let bbox: Vec<String> = corners.iter().map(|&v| number(v, frame)).collect();
    Ok(format!(
        "<confidence>{confidence}</confidence>\n<tool_call>\n{{\"name\": \"{ZOOM}\", \"arguments\": {{\"bbox_2d\": [{}]}}}}\n</tool_call>",
        bbox.join(", ")
    ))
}

/// `target` (a box in `from`) grown around its centre to `context` times its size, at least
/// [`MIN_ZOOM_SIDE`] a side, clipped to the image: in resized pixels.
fn zoom_region(target: BBox, from: Frame, frames: ImageFrames, context: f64) -> BBox {
    let b = frames.convert_box(target, from, Frame::Resized);
    let centre = b.centre();
    let half = Size::new(
        (b.width() * context).max(MIN_ZOOM_SIDE) / 2.0,
        (b.height() * context).max(MIN_ZOOM_SIDE) / 2.0,
    );
    let extent = frames.extent(Frame::Resized);
    BBox {
        x1: (centre.x - half.width).max(0.0),
        y1: (centre.y - half.height).max(0.0),
        x2: (centre.x + half.width).min(extent.width),
        y2: (centre.y + half.height).min(extent.height),
    }
}

/// `v` rounded down (or `up`) to the precision coordinates are written with in `frame` (whole
/// numbers; thousandths when normalized). Within 1e-6 of that precision counts as on it, so
/// conversion noise (575.0000000001) does not widen a region by a whole step.
fn written_outwards(v: f64, frame: Frame, up: bool) -> f64 {
    const NOISE: f64 = 1e-6;
    let scale = if frame == Frame::Normalized { 1000.0 } else { 1.0 };
    let scaled = v * scale;
    let whole = if up {
        (scaled - NOISE).ceil()
    } else {
        (scaled + NOISE).floor()
    };
    whole / scale
}

/// A confidence as a model writes it: at most two decimals (`0.3`, `0.85`, `1`).
fn confidence_text(confidence: f64) -> Result<String, AnswerError> {
    if !(0.0..=1.0).contains(&confidence) {
        return Err(AnswerError::Confidence { value: confidence });
    }
    Ok(format!("{}", (confidence * 100.0).round() / 100.0))
}

fn first_target(sample: &Sample) -> Result<&Target, AnswerError> {
    sample.targets.first().ok_or_else(|| AnswerError::NoTarget {
        id: sample.id.clone(),
    })
}

/// The answer text in `preset`, each sample-frame point written as `convert` places it in `frame`.
fn write_answer(
    sample: &Sample,
    preset: Preset,
    frame: Frame,
    convert: impl Fn(Point) -> Point,
) -> Result<String, AnswerError> {
    let write = |v: f64| number(v, frame);
    if sample.none {
        return Ok("None".to_string());
    }
    let first = first_target(sample)?;
    Ok(match preset {
        Preset::Point => {
            let p = convert(first.shape.click_point());
            format!("({}, {})", write(p.x), write(p.y))
        }
        Preset::Box => {
            let b = first.shape.bounding_box();
            let (a, z) = (convert(Point::new(b.x1, b.y1)), convert(Point::new(b.x2, b.y2)));
            format!("[{}, {}, {}, {}]", write(a.x), write(a.y), write(z.x), write(z.y))
        }
        Preset::OvdJson => {
            let items: Vec<Value> = sample
                .targets
                .iter()
                .map(|t| {
                    let b = t.shape.bounding_box();
                    let (a, z) = (convert(Point::new(b.x1, b.y1)), convert(Point::new(b.x2, b.y2)));
                    let coords: Vec<Value> = [a.x, a.y, z.x, z.y]
                        .iter()
                        .map(|&v| json_number(v, frame))
                        .collect();
                    json!({"bbox_2d": coords, "label": t.label.clone().unwrap_or_default()})
                })
                .collect();
            format!("```json\n{}\n```", Value::Array(items))
        }
    })
}

/// The format and frame the sample's prompt asked for; `model_frame` when its metadata names no frame.
fn asked(sample: &Sample, model_frame: Frame) -> Result<(Preset, Frame), AnswerError> {
    let text = |field: &'static str| sample.metadata.get(field).map(|v| (field, v));
    let bad = |field: &'static str, value: &Value, problem: &str| AnswerError::Metadata {
        id: sample.id.clone(),
        field,
        value: value.to_string(),
        problem: problem.to_string(),
    };
    if let Some((field, value)) = text("reasoning") {
        match value.as_str() {
            Some("none") => {}
            Some(_) => {
                return Err(AnswerError::Reasoning {
                    id: sample.id.clone(),
                });
            }
            None => return Err(bad(field, value, "expected a string")),
        }
    }
    let preset = match text("answer_format") {
        None => Preset::for_task(sample.task),
        Some((field, value)) => [Preset::Point, Preset::Box, Preset::OvdJson]
            .into_iter()
            .find(|p| value.as_str() == Some(p.answer_format()))
            .ok_or_else(|| bad(field, value, "expected point, box or json_list"))?,
    };
    let frame = match text("answer_frame") {
        None => model_frame,
        Some((field, value)) => value
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(field, value, "expected pixel, resized, normalized or qwen1000"))?,
    };
    if preset == Preset::OvdJson && sample.task != Task::Detection {
        return Err(bad(
            "answer_format",
            &json!("json_list"),
            "only detection samples answer a list",
        ));
    }
    Ok((preset, frame))
}

/// A coordinate as text: an integer in pixel-like frames, three decimals when normalized.
fn number(v: f64, frame: Frame) -> String {
    match frame {
        Frame::Normalized => format!("{:.3}", v),
        _ => format!("{}", v.round() as i64),
    }
}

fn json_number(v: f64, frame: Frame) -> Value {
    match frame {
        Frame::Normalized => json!((v * 1000.0).round() / 1000.0),
        _ => json!(v.round() as i64),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use image::{Rgb, RgbImage};

    use super::*;
    use crate::tool::answer::answer_in_full_view;
    use crate::tool::{CallOutcome, ToolContext, Toolbox, ZoomParams, ZoomTool};
    use groundrl_score::data::{ImageRef, Shape};
    use groundrl_score::parse::{Answer, parse_completion, tool_call_in};
    use groundrl_score::resize::PixelBudget;

    fn sample(task: Task, shapes: Vec<Shape>, meta: &[(&str, &str)]) -> Sample {
        Sample {
            id: "s1".into(),
            source: "test".into(),
            task,
            images: vec![ImageRef {
                path: "a.png".into(),
                width: 200,
                height: 100,
            }],
            instruction: "Click OK".into(),
            targets: shapes
                .into_iter()
                .map(|shape| Target {
                    shape,
                    label: Some("ok".into()),
                })
                .collect(),
            frame: Frame::Pixel,
            none: false,
            prompt: vec![],
            metadata: meta
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    /// Original 200x100, resized 280x140 (x1.4 on both sides).
    fn frames() -> ImageFrames {
        ImageFrames {
            original: Size::new(200.0, 100.0),
            resized: Size::new(280.0, 140.0),
        }
    }

    #[test]
    fn a_click_is_the_box_centre_in_the_model_frame_by_default() {
        let s = sample(
            Task::PointGrounding,
            vec![Shape::Box([10.0, 20.0, 30.0, 40.0])],
            &[],
        );
        // Centre (20, 30) x 1.4 = (28, 42).
        assert_eq!(
            reference_answer(&s, frames(), Frame::Resized).unwrap(),
            "(28, 42)"
        );
        // (20 / 200, 30 / 100) on the 0-1000 grid.
        assert_eq!(
            reference_answer(&s, frames(), Frame::Qwen1000).unwrap(),
            "(100, 300)"
        );
        let asked = sample(
            Task::PointGrounding,
            vec![Shape::Box([10.0, 20.0, 30.0, 40.0])],
            &[("answer_frame", "resized")],
        );
        assert_eq!(
            reference_answer(&asked, frames(), Frame::Qwen1000).unwrap(),
            "(28, 42)"
        );
    }

    #[test]
    fn the_prompted_frame_and_format_are_used() {
        let shapes = vec![Shape::Box([10.0, 20.0, 31.0, 40.0])];
        let s = sample(
            Task::PointGrounding,
            shapes.clone(),
            &[
                ("answer_format", "box"),
                ("answer_frame", "qwen1000"),
                ("reasoning", "none"),
            ],
        );
        // x: 10/200*1000 = 50, 31/200*1000 = 155; y: 20/100*1000 = 200, 400.
        assert_eq!(
            reference_answer(&s, frames(), Frame::Resized).unwrap(),
            "[50, 200, 155, 400]"
        );
        let s = sample(Task::PointGrounding, shapes, &[("answer_frame", "normalized")]);
        // Centre (20.5, 30) / (200, 100).
        assert_eq!(
            reference_answer(&s, frames(), Frame::Resized).unwrap(),
            "(0.102, 0.300)"
        );
    }

    #[test]
    fn points_and_polygons_click_where_expected() {
        let s = sample(
            Task::PointGrounding,
            vec![Shape::Point([5.0, 5.0])],
            &[("answer_frame", "pixel")],
        );
        assert_eq!(reference_answer(&s, frames(), Frame::Resized).unwrap(), "(5, 5)");
        let triangle = Shape::Polygon(vec![[0.0, 0.0], [30.0, 0.0], [0.0, 30.0]]);
        let s = sample(Task::PointGrounding, vec![triangle], &[("answer_frame", "pixel")]);
        assert_eq!(
            reference_answer(&s, frames(), Frame::Resized).unwrap(),
            "(10, 10)"
        );
    }

    #[test]
    fn detection_lists_every_target_and_none_answers_none() {
        let boxes = vec![
            Shape::Box([0.0, 0.0, 10.0, 10.0]),
            Shape::Box([20.0, 20.0, 40.0, 30.0]),
        ];
        let s = sample(Task::Detection, boxes, &[("answer_frame", "pixel")]);
        assert_eq!(
            reference_answer(&s, frames(), Frame::Resized).unwrap(),
            "```json\n[{\"bbox_2d\":[0,0,10,10],\"label\":\"ok\"},{\"bbox_2d\":[20,20,40,30],\"label\":\"ok\"}]\n```"
        );
        let mut none = sample(Task::Detection, vec![], &[]);
        none.none = true;
        assert_eq!(reference_answer(&none, frames(), Frame::Resized).unwrap(), "None");
    }

    #[test]
    fn reasoning_prompts_and_bad_metadata_are_refused_with_the_field() {
        let shapes = vec![Shape::Box([0.0, 0.0, 1.0, 1.0])];
        let s = sample(Task::PointGrounding, shapes.clone(), &[("reasoning", "standard")]);
        assert_eq!(
            reference_answer(&s, frames(), Frame::Resized),
            Err(AnswerError::Reasoning { id: "s1".into() })
        );
        let s = sample(Task::PointGrounding, shapes, &[("answer_frame", "inches")]);
        let e = reference_answer(&s, frames(), Frame::Resized)
            .unwrap_err()
            .to_string();
        assert!(e.contains("answer_frame") && e.contains("inches"), "{e}");
        let empty = sample(Task::PointGrounding, vec![], &[]);
        assert_eq!(
            reference_answer(&empty, frames(), Frame::Resized),
            Err(AnswerError::NoTarget { id: "s1".into() })
        );
    }

    #[test]
    fn the_answer_about_the_full_view_is_the_reference_answer_with_a_confidence() {
        let full = View::full(frames());
        let cases = [
            (
                Task::PointGrounding,
                vec![Shape::Box([10.0, 20.0, 30.0, 40.0])],
                "(28, 42)",
            ),
            (
                Task::BoxGrounding,
                vec![Shape::Box([10.0, 20.0, 30.0, 40.0])],
                "[14, 28, 42, 56]",
            ),
            (
                Task::Detection,
                vec![Shape::Box([0.0, 0.0, 10.0, 10.0])],
                "```json\n[{\"bbox_2d\":[0,0,14,14],\"label\":\"ok\"}]\n```",
            ),
        ];
        for (task, shapes, answer) in cases {
            let s = sample(task, shapes, &[]);
            assert_eq!(reference_answer(&s, frames(), Frame::Resized).unwrap(), answer);
            let with = reference_answer_in_view(&s, frames(), Frame::Resized, &full, 0.9).unwrap();
            assert_eq!(with, format!("{answer}\n<confidence>0.9</confidence>"));
            // read back: the answer is the target, the number after it the confidence
            let parsed = parse_completion(&with).unwrap();
            assert_eq!(parsed.confidence, Some(0.9));
            let expected = parse_completion(answer).unwrap();
            assert_eq!((parsed.answer, parsed.syntax), (expected.answer, expected.syntax));
        }
    }

    #[test]
    fn confidences_are_written_as_models_write_them_and_checked() {
        let s = sample(Task::PointGrounding, vec![Shape::Point([5.0, 5.0])], &[]);
        let full = View::full(frames());
        let text = |c: f64| reference_answer_in_view(&s, frames(), Frame::Resized, &full, c);
        assert_eq!(text(1.0).unwrap(), "(7, 7)\n<confidence>1</confidence>");
        assert_eq!(text(0.854).unwrap(), "(7, 7)\n<confidence>0.85</confidence>");
        assert_eq!(text(1.5), Err(AnswerError::Confidence { value: 1.5 }));
        assert!(text(f64::NAN).is_err());
        let mut none = sample(Task::Detection, vec![], &[]);
        none.none = true;
        let text = reference_answer_in_view(&none, frames(), Frame::Resized, &full, 0.9).unwrap();
        assert_eq!(text, "None\n<confidence>0.9</confidence>");
        let parsed = parse_completion(&text).unwrap();
        assert_eq!((parsed.answer, parsed.confidence), (Answer::NoObjects, Some(0.9)));
    }

    fn zoom_call(shape: Shape, frame: &str, context: f64) -> Result<String, AnswerError> {
        let s = sample(Task::PointGrounding, vec![shape], &[("answer_frame", frame)]);
        reference_zoom_call(&s, frames(), Frame::Resized, 0.3, context)
    }

    fn call_text(bbox: &str) -> String {
        format!(
            "<confidence>0.3</confidence>\n<tool_call>\n{{\"name\": \"zoom\", \"arguments\": {{\"bbox_2d\": {bbox}}}}}\n</tool_call>"
        )
    }

    #[test]
    fn the_zoom_region_is_the_target_grown_clipped_and_rounded_outwards() {
        // Pixel [90, 45, 100, 50] is resized [126, 63, 140, 70]: 14 x 7 around (133, 66.5); 4 times
        // that is 56 x 28: x 105..161, y 52.5..80.5.
        let small = Shape::Box([90.0, 45.0, 100.0, 50.0]);
        assert_eq!(
            zoom_call(small.clone(), "resized", 4.0).unwrap(),
            call_text("[105, 52, 161, 81]")
        );
        // The same region on the 0-1000 grid (/ 280 and / 140) and as fractions.
        assert_eq!(
            zoom_call(small.clone(), "qwen1000", 4.0).unwrap(),
            call_text("[375, 375, 575, 575]")
        );
        assert_eq!(
            zoom_call(small, "normalized", 4.0).unwrap(),
            call_text("[0.375, 0.375, 0.575, 0.575]")
        );
        // In a corner: resized [0, 0, 14, 14] grown 8 times is -49..63, clipped at 0.
        let corner = Shape::Box([0.0, 0.0, 10.0, 10.0]);
        assert_eq!(
            zoom_call(corner, "resized", 8.0).unwrap(),
            call_text("[0, 0, 63, 63]")
        );
        // A point has no size: 28 x 28 around resized (133, 65.8).
        let point = Shape::Point([95.0, 47.0]);
        assert_eq!(
            zoom_call(point, "resized", 4.0).unwrap(),
            call_text("[119, 51, 147, 80]")
        );
        let e = zoom_call(Shape::Point([1.0, 1.0]), "resized", 0.5);
        assert_eq!(e, Err(AnswerError::ZoomContext { value: 0.5 }));
        let empty = sample(Task::PointGrounding, vec![], &[]);
        assert_eq!(
            reference_zoom_call(&empty, frames(), Frame::Resized, 0.3, 4.0),
            Err(AnswerError::NoTarget { id: "s1".into() })
        );
    }

    #[test]
    fn a_reference_trajectory_runs_through_the_zoom_tool_and_maps_back() {
        let s = sample(
            Task::PointGrounding,
            vec![Shape::Box([90.0, 45.0, 100.0, 50.0])],
            &[],
        );
        let call = reference_zoom_call(&s, frames(), Frame::Resized, 0.3, 4.0).unwrap();
        // The parser reads it as a zoom call with the stated confidence.
        let parsed = parse_completion(&call).unwrap();
        assert_eq!(parsed.confidence, Some(0.3));
        let Answer::ToolCall(zoom) = &parsed.answer else {
            panic!("{parsed:?}")
        };
        assert_eq!(zoom.name, "zoom");
        assert_eq!(zoom.arguments["bbox_2d"], json!([105, 52, 161, 81]));
        assert!(matches!(tool_call_in(&call), Some(Ok(_))));

        // The zoom tool crops it from the original: resized x 105..161 is original 75..115.
        let image = RgbImage::from_fn(200, 100, |x, y| Rgb([x as u8, y as u8, 0]));
        let full = View::full(frames());
        let context = ToolContext {
            image: &image,
            view: &full,
            model_frame: Frame::Resized,
        };
        let tool = ZoomTool::new(ZoomParams {
            max_zoom: 4,
            budget: PixelBudget::default(),
        });
        let toolbox = Toolbox::new(vec![Box::new(tool)]);
        let reply = toolbox.run(&call, &context).unwrap();
        assert_eq!(reply.outcome, CallOutcome::Ok, "{}", reply.output.text);
        let view = reply.output.view.unwrap();
        assert_eq!(view.origin, Point::new(75.0, 37.0));
        let covers = |x: f64, y: f64| {
            (view.origin.x..=view.origin.x + view.region.width).contains(&x)
                && (view.origin.y..=view.origin.y + view.region.height).contains(&y)
        };
        assert!(covers(90.0, 45.0) && covers(100.0, 50.0), "{view:?}");

        // Answered about the zoom, the click maps back to the target's centre: original (95, 47.5),
        // resized (133, 66.5), up to the rounding of the zoomed view's whole numbers.
        let answer = reference_answer_in_view(&s, frames(), Frame::Resized, &view, 0.9).unwrap();
        assert!(answer.ends_with("\n<confidence>0.9</confidence>"), "{answer}");
        let parsed = parse_completion(&answer).unwrap();
        assert_eq!(parsed.confidence, Some(0.9));
        let back = answer_in_full_view(&parsed, &view, &full, Frame::Resized);
        let [x, y] = back.click_points()[0];
        assert!(
            (x - 133.0).abs() < 0.5 && (y - 66.5).abs() < 0.5,
            "({x}, {y}) from {answer}"
        );
    }
}
