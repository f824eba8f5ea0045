//! One record to score, and how its target and the model's answer are brought into one frame.
//!
//! A record (one JSONL line):
//! `{"completion": str, "target": {"boxes": [{"bbox": [x1,y1,x2,y2], "label": str}],
//!   "frame": "pixel"|"normalized"|"qwen1000"|"resized", "image_size": [w,h],
//!   "resized_size": [w,h] (optional), "none": bool (optional)}, "num_tokens": int (optional),
//!   "tool_use": {"calls": int, "successful": int, "confidence_before": float, "confidence_after":
//!   float} (optional; the confidences may be left out; see [`super::gated`])}`.
//!
//! Frames (mixing them silently zeroes a run's rewards): target boxes are in `target.frame`; the answer
//! is in the spec's `model_frame`, unless the parser saw a syntax that implies a frame (Qwen-VL box
//! tokens: 0-1000) or, with `detect_frame`, its numbers do not fit `model_frame` and do fit another
//! ([`ImageFrames::detect`]). With `image_size` both sides are converted to original pixels before
//! scoring; `resized_size`, when absent, is computed with smart_resize under the spec's budget.
//! Without `image_size` nothing can be converted or detected: the answer must be in the target's
//! frame, and scoring happens there.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::data::{Sample, Shape, Target as SampleTarget};
use crate::frame::{Frame, FrameError, ImageFrames, Size};
use crate::geometry::{BBox, LabeledBox, Point};
use crate::parse::Parsed;
use crate::resize::PixelBudget;

/// One record: a completion and what it should have found.
#[derive(Clone, Debug, PartialEq)]
pub struct RewardInput {
    pub completion: String,
    pub target: Target,
    /// Tokens of the completion, for length rewards.
    pub num_tokens: Option<u64>,
    /// What the rollout did with tools, for the gated reward; `None` for a completion scored on its
    /// own, which then counts as no call with its stated confidence before and after
    /// ([`ToolUse::without_tools`]).
    pub tool_use: Option<ToolUse>,
}

/// Ground truth of one record.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    #[serde(default)]
    pub boxes: Vec<TargetBox>,
    pub frame: Frame,
    /// Original image `[width, height]`.
    #[serde(default)]
    pub image_size: Option<[u64; 2]>,
    /// Resized image `[width, height]` as the processor made it.
    #[serde(default)]
    pub resized_size: Option<[u64; 2]>,
    /// The object is absent: the right answer is "None".
    #[serde(default)]
    pub none: bool,
}

/// One ground-truth box; a missing label is `""` (as VLM-R1 reads it).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetBox {
    pub bbox: [f64; 4],
    #[serde(default)]
    pub label: String,
}

/// What a rollout did with tools, as the gated reward reads it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolUse {
    /// Every tool call the model ended a turn with, run or not (malformed, unknown tool, refused,
    /// past the turn limit).
    pub calls: u32,
    /// Calls that ran and replied (`groundrl_core::tool::CallOutcome::Ok`).
    pub successful: u32,
    /// The confidence stated before the first call.
    #[serde(default)]
    pub confidence_before: Option<f64>,
    /// The last confidence stated.
    #[serde(default)]
    pub confidence_after: Option<f64>,
}

impl ToolUse {
    /// A completion that made no call and stated `confidence` (or none).
    pub fn without_tools(confidence: Option<f64>) -> Self {
        Self {
            calls: 0,
            successful: 0,
            confidence_before: confidence,
            confidence_after: confidence,
        }
    }

    /// `after - before`, or `None` when either was not stated.
    pub fn gain(&self) -> Option<f64> {
        Some(self.confidence_after? - self.confidence_before?)
    }

    /// Checks what the types cannot: no more successes than calls, confidences in [0, 1].
    pub fn validate(&self) -> Result<(), InputError> {
        if self.successful > self.calls {
            return Err(InputError::new(
                "tool_use.successful",
                format!("{} is more than calls ({})", self.successful, self.calls),
            ));
        }
        let stated = [
            ("tool_use.confidence_before", self.confidence_before),
            ("tool_use.confidence_after", self.confidence_after),
        ];
        for (field, confidence) in stated {
            if let Some(c) = confidence.filter(|c| !(0.0..=1.0).contains(c)) {
                return Err(InputError::new(field, format!("{c} is not in [0, 1]")));
            }
        }
        Ok(())
    }
}

/// The ground truth of groundrl's Parquet files (`crates/groundrl-core/src/data/parquet.rs` writes
/// it); `task` is not needed to score.
#[derive(Deserialize)]
struct DatasetTruth {
    frame: Frame,
    #[serde(default)]
    none: bool,
    image_sizes: Vec<[u64; 2]>,
    targets: Vec<SampleTarget>,
}

/// A problem with one field of a record; the record cannot be scored.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct InputError {
    pub field: String,
    pub problem: String,
}

impl InputError {
    pub fn new(field: &str, problem: impl Into<String>) -> Self {
        Self {
            field: field.to_string(),
            problem: problem.into(),
        }
    }
}

impl RewardInput {
    /// Reads the fields this module needs from a JSON object; other fields are ignored (callers
    /// keep them).
    pub fn from_json_object(obj: &Map<String, Value>) -> Result<Self, InputError> {
        let completion = match obj.get("completion") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(InputError::new(
                    "completion",
                    format!("expected a string, got {other}"),
                ));
            }
            None => return Err(InputError::new("completion", "missing")),
        };
        let target_value = obj
            .get("target")
            .ok_or_else(|| InputError::new("target", "missing"))?;
        let target = Target::from_json(target_value)?;
        let num_tokens = match obj.get("num_tokens") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| {
                InputError::new("num_tokens", format!("expected a non-negative integer, got {v}"))
            })?),
        };
        let tool_use = match obj.get("tool_use") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let t = ToolUse::deserialize(v).map_err(|e| InputError::new("tool_use", e.to_string()))?;
                t.validate()?;
                Some(t)
            }
        };
        Ok(Self {
            completion,
            target,
            num_tokens,
            tool_use,
        })
    }
}

impl Target {
    /// The ground truth of a dataset sample for scoring a completion about its first image, whose
    /// resized size (`[width, height]`, as the processor made it) is `resized` when known. Box
    /// targets are kept as they are and polygons become their bounding boxes; a point target has no
    /// extent for the box and point-in-box rewards and is refused.
    pub fn from_sample(sample: &Sample, resized: Option<[u64; 2]>) -> Result<Self, InputError> {
        let image = sample
            .images
            .first()
            .ok_or_else(|| InputError::new("images", "no image"))?;
        let size = [u64::from(image.width), u64::from(image.height)];
        Self::from_targets(&sample.targets, sample.frame, sample.none, size, resized)
    }

    /// A record's `target`: this type's own fields, or the ground truth groundrl's Parquet files hold
    /// for verl (`reward_model.ground_truth`: `{"task", "frame", "none", "image_sizes", "targets"}`,
    /// scored as [`Self::from_sample`] scores the sample), so a trainer can pass that column as it is.
    pub fn from_json(value: &Value) -> Result<Self, InputError> {
        if value.get("targets").is_some() {
            let truth =
                DatasetTruth::deserialize(value).map_err(|e| InputError::new("target", e.to_string()))?;
            let size = truth
                .image_sizes
                .first()
                .copied()
                .ok_or_else(|| InputError::new("target.image_sizes", "no image"))?;
            return Self::from_targets(&truth.targets, truth.frame, truth.none, size, None);
        }
        let target = Target::deserialize(value).map_err(|e| InputError::new("target", e.to_string()))?;
        target.validate()?;
        Ok(target)
    }

    fn from_targets(
        targets: &[SampleTarget],
        frame: Frame,
        none: bool,
        image_size: [u64; 2],
        resized: Option<[u64; 2]>,
    ) -> Result<Self, InputError> {
        let boxes = targets
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let bbox = match &t.shape {
                    Shape::Box(b) => *b,
                    Shape::Polygon(vertices) => bounding_box(vertices),
                    Shape::Point(_) => {
                        return Err(InputError::new(
                            &format!("targets[{i}]"),
                            "a point target cannot be scored by box rewards",
                        ));
                    }
                };
                Ok(TargetBox {
                    bbox,
                    label: t.label.clone().unwrap_or_default(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let target = Self {
            boxes,
            frame,
            image_size: Some(image_size),
            resized_size: resized,
            none,
        };
        target.validate()?;
        Ok(target)
    }

    /// Checks what the types cannot: well-formed boxes, "none" without boxes.
    pub fn validate(&self) -> Result<(), InputError> {
        if self.none && !self.boxes.is_empty() {
            return Err(InputError::new("target.none", "is true but boxes are given"));
        }
        for (i, b) in self.boxes.iter().enumerate() {
            let [x1, y1, x2, y2] = b.bbox;
            if !(x1 <= x2 && y1 <= y2) {
                return Err(InputError::new(
                    &format!("target.boxes[{i}].bbox"),
                    format!("{:?} is not [x1, y1, x2, y2] with x1 <= x2 and y1 <= y2", b.bbox),
                ));
            }
        }
        Ok(())
    }

    /// Original and resized sizes of the image, when `image_size` is given.
    pub fn image_frames(&self, budget: PixelBudget) -> Result<Option<ImageFrames>, InputError> {
        let Some([w, h]) = self.image_size else {
            return Ok(None);
        };
        match self.resized_size {
            Some([rw, rh]) if rw == 0 || rh == 0 => Err(InputError::new(
                "target.resized_size",
                format!("[{rw}, {rh}] has a zero side"),
            )),
            Some([rw, rh]) => Ok(Some(ImageFrames {
                original: Size::new(w as f64, h as f64),
                resized: Size::new(rw as f64, rh as f64),
            })),
            None => ImageFrames::from_original(w, h, budget)
                .map(Some)
                .map_err(|e| InputError::new("target.image_size", e.to_string())),
        }
    }
}

/// `[x1, y1, x2, y2]` around `vertices`.
fn bounding_box(vertices: &[[f64; 2]]) -> [f64; 4] {
    vertices.iter().fold(
        [f64::INFINITY, f64::INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY],
        |[x1, y1, x2, y2], &[x, y]| [x1.min(x), y1.min(y), x2.max(x), y2.max(y)],
    )
}

/// The common frame a record is scored in, and what is known about it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScoringFrame {
    /// Conversions, when the image size is known (scoring then happens in original pixels).
    pub frames: Option<ImageFrames>,
    /// The frame both sides end up in.
    pub frame: Frame,
}

impl ScoringFrame {
    pub fn new(target: &Target, frames: Option<ImageFrames>) -> Self {
        let frame = if frames.is_some() {
            Frame::Pixel
        } else {
            target.frame
        };
        Self { frames, frame }
    }

    /// The whole image's width and height in the scoring frame, when known.
    pub fn image_extent(&self) -> Option<Size> {
        match (self.frames, self.frame) {
            (Some(f), frame) => Some(f.extent(frame)),
            (None, Frame::Normalized) => Some(Size::new(1.0, 1.0)),
            (None, Frame::Qwen1000) => Some(Size::new(1000.0, 1000.0)),
            (None, _) => None,
        }
    }

    /// Target boxes in the scoring frame.
    pub fn target_boxes(&self, target: &Target) -> Vec<LabeledBox> {
        target
            .boxes
            .iter()
            .map(|b| LabeledBox {
                bbox: self.convert_box(BBox::from_xyxy(b.bbox), target.frame),
                label: b.label.clone(),
            })
            .collect()
    }

    fn convert_box(&self, b: BBox, from: Frame) -> BBox {
        self.frames.map_or(b, |f| f.convert_box(b, from, self.frame))
    }

    fn convert_point(&self, p: Point, from: Frame) -> Point {
        self.frames.map_or(p, |f| f.convert_point(p, from, self.frame))
    }

    /// The frame the answer's numbers are read in (see the module docs); `Err` is why the answer
    /// could not be given a frame (a scoring failure, not a bad record).
    pub fn answer_frame(
        &self,
        parsed: &Parsed,
        model_frame: Frame,
        detect: bool,
    ) -> Result<Option<Frame>, FrameError> {
        let values = answer_values(parsed);
        if values.is_empty() {
            return Ok(None);
        }
        let frame = match (parsed.frame_hint, self.frames) {
            (Some(hint), _) => hint,
            (None, Some(frames)) if detect => frames.detect(&values, model_frame)?.frame,
            (None, _) => model_frame,
        };
        Ok(Some(frame))
    }

    /// The answer's boxes and clicks converted from `from` to the scoring frame.
    pub fn prediction(&self, parsed: &Parsed, from: Frame) -> super::Prediction {
        let boxes = parsed
            .boxes()
            .iter()
            .map(|b| LabeledBox {
                bbox: self.convert_box(BBox::from_xyxy(b.coords), from),
                label: b.label.clone().unwrap_or_default(),
            })
            .collect();
        let clicks = parsed
            .click_points()
            .into_iter()
            .map(|[x, y]| self.convert_point(Point::new(x, y), from))
            .collect();
        super::Prediction {
            boxes,
            clicks,
            no_objects: matches!(parsed.answer, crate::parse::Answer::NoObjects),
        }
    }
}

/// Every coordinate of the answer, for frame detection: box corners, then click points.
fn answer_values(parsed: &Parsed) -> Vec<f64> {
    let corners = parsed.boxes().iter().flat_map(|b| b.coords);
    corners
        .chain(parsed.click_points().into_iter().flatten())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn input(v: Value) -> Result<RewardInput, InputError> {
        RewardInput::from_json_object(v.as_object().unwrap())
    }

    fn sample(targets: Value) -> Sample {
        serde_json::from_value(json!({
            "id": "s1", "source": "synth", "task": "box_grounding", "frame": "pixel",
            "images": [{"path": "a.png", "width": 640, "height": 480}],
            "instruction": "Save", "targets": targets
        }))
        .unwrap()
    }

    #[test]
    fn the_parquet_ground_truth_reads_as_the_sample_does() {
        let targets = json!([
            {"shape": {"type": "box", "coords": [1, 2, 30, 40]}, "label": "Save"},
            {"shape": {"type": "polygon", "coords": [[5, 9], [12, 3], [8, 20]]}}
        ]);
        let truth = json!({"task": "box_grounding", "frame": "pixel", "none": false,
            "image_sizes": [[640, 480]], "targets": targets.clone()});
        let from_truth = Target::from_json(&truth).unwrap();
        assert_eq!(from_truth, Target::from_sample(&sample(targets), None).unwrap());
        assert_eq!(from_truth.boxes[1].bbox, [5.0, 3.0, 12.0, 20.0]);
        let no_image = json!({"frame": "pixel", "image_sizes": [], "targets": []});
        assert_eq!(
            Target::from_json(&no_image).unwrap_err().field,
            "target.image_sizes"
        );
        let point = json!({"frame": "pixel", "image_sizes": [[9, 9]],
            "targets": [{"shape": {"type": "point", "coords": [1, 2]}}]});
        assert_eq!(Target::from_json(&point).unwrap_err().field, "targets[0]");
    }

    #[test]
    fn targets_from_samples() {
        let boxes = sample(json!([
            {"shape": {"type": "box", "coords": [1, 2, 30, 40]}, "label": "Save"},
            {"shape": {"type": "polygon", "coords": [[5, 9], [12, 3], [8, 20]]}}
        ]));
        let t = Target::from_sample(&boxes, Some([644, 476])).unwrap();
        assert_eq!(t.boxes[0].bbox, [1.0, 2.0, 30.0, 40.0]);
        assert_eq!(t.boxes[0].label, "Save");
        assert_eq!(t.boxes[1].bbox, [5.0, 3.0, 12.0, 20.0]);
        assert_eq!(t.boxes[1].label, "");
        assert_eq!(
            (t.image_size, t.resized_size),
            (Some([640, 480]), Some([644, 476]))
        );
        assert_eq!(t.frame, Frame::Pixel);
        let point = sample(json!([{"shape": {"type": "point", "coords": [3, 4]}}]));
        assert_eq!(Target::from_sample(&point, None).unwrap_err().field, "targets[0]");
    }

    #[test]
    fn reads_a_record_and_names_bad_fields() {
        let ok = input(json!({
            "completion": "x", "num_tokens": 12, "id": 7,
            "target": {"boxes": [{"bbox": [1, 2, 3, 4], "label": "cat"}], "frame": "pixel", "image_size": [10, 20]}
        }))
        .unwrap();
        assert_eq!(ok.num_tokens, Some(12));
        assert_eq!(ok.tool_use, None);
        assert_eq!(ok.target.boxes[0].bbox, [1.0, 2.0, 3.0, 4.0]);
        let field = |v: Value| input(v).unwrap_err().field;
        assert_eq!(field(json!({"target": {"frame": "pixel"}})), "completion");
        assert_eq!(
            field(json!({"completion": 3, "target": {"frame": "pixel"}})),
            "completion"
        );
        assert_eq!(field(json!({"completion": ""})), "target");
        let e = input(json!({"completion": "", "target": {"frame": "pixels"}})).unwrap_err();
        assert!(e.problem.contains("pixels"), "{e}");
        let e =
            input(json!({"completion": "", "target": {"frame": "pixel", "imagesize": [1, 1]}})).unwrap_err();
        assert!(e.problem.contains("imagesize"), "{e}");
        let inverted =
            json!({"completion": "", "target": {"frame": "pixel", "boxes": [{"bbox": [5, 0, 1, 1]}]}});
        assert_eq!(input(inverted).unwrap_err().field, "target.boxes[0].bbox");
        let none_with_boxes = json!({"completion": "", "target": {"frame": "pixel", "none": true, "boxes": [{"bbox": [0, 0, 1, 1]}]}});
        assert_eq!(input(none_with_boxes).unwrap_err().field, "target.none");
        assert_eq!(
            field(json!({"completion": "", "num_tokens": -1, "target": {"frame": "pixel"}})),
            "num_tokens"
        );
        let tool = |t: Value| input(json!({"completion": "", "target": {"frame": "pixel"}, "tool_use": t}));
        let t = tool(json!({"calls": 2, "successful": 1, "confidence_before": 0.25}))
            .unwrap()
            .tool_use;
        let expected = ToolUse {
            calls: 2,
            successful: 1,
            confidence_before: Some(0.25),
            confidence_after: None,
        };
        assert_eq!(t, Some(expected));
        let e = tool(json!({"calls": 1, "succesful": 1})).unwrap_err();
        assert!(e.field == "tool_use" && e.problem.contains("succesful"), "{e}");
        assert_eq!(
            tool(json!({"calls": -1, "successful": 0})).unwrap_err().field,
            "tool_use"
        );
        let e = tool(json!({"calls": 1, "successful": 2})).unwrap_err();
        assert_eq!(e.field, "tool_use.successful");
        let e = tool(json!({"calls": 1, "successful": 1, "confidence_after": 80})).unwrap_err();
        assert_eq!(e.field, "tool_use.confidence_after");
    }

    #[test]
    fn resized_size_is_computed_or_taken() {
        let mut t =
            input(json!({"completion": "", "target": {"frame": "pixel", "image_size": [1920, 1080]}}))
                .unwrap()
                .target;
        let f = t.image_frames(PixelBudget::default()).unwrap().unwrap();
        assert_eq!(f.resized, Size::new(1932.0, 1092.0));
        t.resized_size = Some([1000, 500]);
        assert_eq!(
            t.image_frames(PixelBudget::default()).unwrap().unwrap().resized,
            Size::new(1000.0, 500.0)
        );
        t.image_size = Some([0, 5]);
        t.resized_size = None;
        assert_eq!(
            t.image_frames(PixelBudget::default()).unwrap_err().field,
            "target.image_size"
        );
    }

    #[test]
    fn targets_are_converted_to_pixels() {
        let t = input(json!({"completion": "", "target": {
            "frame": "normalized", "image_size": [200, 100], "boxes": [{"bbox": [0.5, 0.5, 1.0, 1.0]}]}}))
        .unwrap()
        .target;
        let sf = ScoringFrame::new(&t, t.image_frames(PixelBudget::default()).unwrap());
        assert_eq!(sf.frame, Frame::Pixel);
        assert_eq!(sf.target_boxes(&t)[0].bbox.xyxy(), [100.0, 50.0, 200.0, 100.0]);
        assert_eq!(sf.image_extent(), Some(Size::new(200.0, 100.0)));
        let no_size = Target {
            image_size: None,
            ..t.clone()
        };
        let sf = ScoringFrame::new(&no_size, None);
        assert_eq!(sf.frame, Frame::Normalized);
        assert_eq!(sf.target_boxes(&no_size)[0].bbox.xyxy(), [0.5, 0.5, 1.0, 1.0]);
        assert_eq!(sf.image_extent(), Some(Size::new(1.0, 1.0)));
    }
}
