//! The reference answer of a sample: the text a model that got it right would write, in the answer
//! format and frame its prompt asked for. Supervised warm-up trains on it.
//!
//! The format and frame are read from the metadata [`super::apply`] records (`answer_format`,
//! `answer_frame`, `reasoning`); a sample without them is asked in its task's default (click point
//! or box or OVD JSON list, in resized pixels), as `Processor::encode_sample` asks it. Pixel-like
//! frames get integers, as models write them; normalized coordinates get three decimals.

use serde_json::{Value, json};

use super::Preset;
use crate::data::{Sample, Task};
use crate::frame::{Frame, ImageFrames};
use crate::geometry::Point;

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
}

/// The reference answer of `sample`, whose image has the sizes `frames`.
pub fn reference_answer(sample: &Sample, frames: ImageFrames) -> Result<String, AnswerError> {
    let (preset, frame) = asked(sample)?;
    let convert = |p: Point| frames.convert_point(p, sample.frame, frame);
    let write = |v: f64| number(v, frame);
    if sample.none {
        return Ok("None".to_string());
    }
    let first = sample.targets.first().ok_or_else(|| AnswerError::NoTarget {
        id: sample.id.clone(),
    })?;
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

/// The format and frame the sample's prompt asked for.
fn asked(sample: &Sample) -> Result<(Preset, Frame), AnswerError> {
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
        None => Frame::Resized,
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

    use super::*;
    use crate::data::{ImageRef, Shape, Target};
    use crate::frame::Size;

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
    fn a_click_is_the_box_centre_in_resized_pixels_by_default() {
        let s = sample(
            Task::PointGrounding,
            vec![Shape::Box([10.0, 20.0, 30.0, 40.0])],
            &[],
        );
        // Centre (20, 30) x 1.4 = (28, 42).
        assert_eq!(reference_answer(&s, frames()).unwrap(), "(28, 42)");
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
        assert_eq!(reference_answer(&s, frames()).unwrap(), "[50, 200, 155, 400]");
        let s = sample(Task::PointGrounding, shapes, &[("answer_frame", "normalized")]);
        // Centre (20.5, 30) / (200, 100).
        assert_eq!(reference_answer(&s, frames()).unwrap(), "(0.102, 0.300)");
    }

    #[test]
    fn points_and_polygons_click_where_expected() {
        let s = sample(
            Task::PointGrounding,
            vec![Shape::Point([5.0, 5.0])],
            &[("answer_frame", "pixel")],
        );
        assert_eq!(reference_answer(&s, frames()).unwrap(), "(5, 5)");
        let triangle = Shape::Polygon(vec![[0.0, 0.0], [30.0, 0.0], [0.0, 30.0]]);
        let s = sample(Task::PointGrounding, vec![triangle], &[("answer_frame", "pixel")]);
        assert_eq!(reference_answer(&s, frames()).unwrap(), "(10, 10)");
    }

    #[test]
    fn detection_lists_every_target_and_none_answers_none() {
        let boxes = vec![
            Shape::Box([0.0, 0.0, 10.0, 10.0]),
            Shape::Box([20.0, 20.0, 40.0, 30.0]),
        ];
        let s = sample(Task::Detection, boxes, &[("answer_frame", "pixel")]);
        assert_eq!(
            reference_answer(&s, frames()).unwrap(),
            "```json\n[{\"bbox_2d\":[0,0,10,10],\"label\":\"ok\"},{\"bbox_2d\":[20,20,40,30],\"label\":\"ok\"}]\n```"
        );
        let mut none = sample(Task::Detection, vec![], &[]);
        none.none = true;
        assert_eq!(reference_answer(&none, frames()).unwrap(), "None");
    }

    #[test]
    fn reasoning_prompts_and_bad_metadata_are_refused_with_the_field() {
        let shapes = vec![Shape::Box([0.0, 0.0, 1.0, 1.0])];
        let s = sample(Task::PointGrounding, shapes.clone(), &[("reasoning", "standard")]);
        assert_eq!(
            reference_answer(&s, frames()),
            Err(AnswerError::Reasoning { id: "s1".into() })
        );
        let s = sample(Task::PointGrounding, shapes, &[("answer_frame", "inches")]);
        let e = reference_answer(&s, frames()).unwrap_err().to_string();
        assert!(e.contains("answer_frame") && e.contains("inches"), "{e}");
        let empty = sample(Task::PointGrounding, vec![], &[]);
        assert_eq!(
            reference_answer(&empty, frames()),
            Err(AnswerError::NoTarget { id: "s1".into() })
        );
    }
}
