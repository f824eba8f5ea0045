//! Grounding accuracy as ScreenSpot, ScreenSpot-Pro and OSWorld-G report it (SeeClick's
//! `screenspot_test.py`, ScreenSpot-Pro's `eval_screenspot_pro.py`, lmms-eval's OSWorld-G task).
//!
//! An item is correct when the model's click (a point, or the centre of a box it answered) lies in
//! a target, inclusive of the border; polygon targets are tested by ray casting, inclusive of edges
//! and vertices ([`hit`]). A refusal item (`Sample::none`, OSWorld-G `refusal`) is correct only if the
//! model explicitly refuses ("None"); a refusal on any other item is wrong. Everything is compared in
//! original image pixels: targets are converted from the sample's frame, answers from theirs
//! ([`resolve`]). One click is scored per item, as ScreenSpot's scripts do: the first point or box
//! of an answer. An item with several targets is hit by a click in any of them. The image clicked
//! on is the sample's first.
//!
//! Every sample stays in the denominator, as ScreenSpot-Pro's `wrong_format` does:
//! - a completion that gives no usable click is a *parse failure*: wrong, counted by reason;
//! - a sample with no prediction line is *missing*: wrong, counted, and listed by id.
//!
//! What is an error rather than a count (the numbers would otherwise mean something else than
//! the user thinks): duplicate sample ids, two prediction lines for one id, a prediction for an id
//! not in the data (a predictions file from another split), and malformed samples.
//!
//! Results are broken down per slice ([`slices`]) and rendered by [`report`].
//!
//! ```
//! use groundrl_score::data::Sample;
//! use groundrl_score::metrics::grounding::{evaluate, read_predictions, EvalOptions};
//!
//! let sample: Sample = serde_json::from_str(
//!     r#"{"id": "s1", "source": "screenspot/web", "task": "point_grounding",
//!         "images": [{"path": "a.png", "width": 1120, "height": 560}], "instruction": "open the menu",
//!         "targets": [{"shape": {"type": "box", "coords": [100, 100, 200, 150]}}], "frame": "pixel"}"#,
//! )
//! .unwrap();
//! // Qwen2.5-VL answers in resized pixels; 1120x560 is not resized, so (150, 125) is in the box.
//! let predictions = read_predictions(r#"{"id": "s1", "completion": "(150, 125)"}"#).unwrap();
//! let report = evaluate(&[sample], &predictions, &EvalOptions::default()).unwrap();
//! assert_eq!((report.overall.n, report.overall.correct), (1, 1));
//! println!("{}", report.to_text());
//! ```

pub mod hit;
pub mod predictions;
pub mod report;
pub mod resolve;
pub mod slices;

use std::collections::HashMap;

use rayon::prelude::*;
use serde::Serialize;

use crate::data::{Sample, Shape};
use crate::frame::{Frame, ImageFrames};
use crate::geometry::{BBox, Point};
use crate::resize::PixelBudget;

pub use hit::Answer;
pub use predictions::{PredictionLine, RawAnswer, read_predictions};
pub use report::GroundingReport;
pub use resolve::{FailureReason, Resolved};

/// How completions are read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EvalOptions {
    /// The frame the model answers in (Qwen2.5-VL: resized-image pixels).
    pub model_frame: Frame,
    /// Let the numbers pick their frame when they do not fit `model_frame` ([`ImageFrames::detect`]).
    pub detect_frame: bool,
    /// The processor's pixel budget, which fixes the resized size of each image.
    pub budget: PixelBudget,
}

impl Default for EvalOptions {
    fn default() -> Self {
        Self {
            model_frame: Frame::Resized,
            detect_frame: false,
            budget: PixelBudget::default(),
        }
    }
}

/// Why an evaluation cannot give meaningful numbers.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GroundingError {
    #[error("predictions line {line}: {field}: {problem}")]
    Prediction {
        line: usize,
        field: String,
        problem: String,
    },
    #[error("predictions lines {first_line} and {line} both answer sample {id:?}")]
    DuplicatePrediction {
        id: String,
        first_line: usize,
        line: usize,
    },
    #[error("predictions line {line}: sample {id:?} is not in the data (predictions from another split?)")]
    UnknownSample { id: String, line: usize },
    #[error("sample id {id:?} occurs more than once in the data")]
    DuplicateSample { id: String },
    #[error("sample {id:?}: {field}: {problem}")]
    BadSample {
        id: String,
        field: String,
        problem: String,
    },
    #[error("the data holds no samples")]
    NoSamples,
}

/// What happened to one item.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", content = "reason", rename_all = "snake_case")]
pub enum Outcome {
    /// The model clicked (right or wrong).
    Clicked,
    /// The model refused.
    Refused,
    /// No usable answer.
    ParseFailure(FailureReason),
    /// No prediction line for this sample.
    Missing,
}

/// The verdict on one sample.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ItemResult {
    pub id: String,
    pub correct: bool,
    pub outcome: Outcome,
    /// The frame the answer's numbers were read in (clicks only).
    pub answer_frame: Option<Frame>,
    /// IoU of the answered box with the best-fitting box target, when the model answered a box and
    /// the item has box targets.
    pub iou: Option<f64>,
    /// Area of the first target as a share of the image area; `None` for a refusal item.
    pub target_area: Option<f64>,
}

/// Scores every sample against its prediction and builds the report.
pub fn evaluate(
    samples: &[Sample],
    predictions: &[PredictionLine],
    options: &EvalOptions,
) -> Result<GroundingReport, GroundingError> {
    let items = score_items(samples, predictions, options)?;
    Ok(GroundingReport::build(samples, &items, options.model_frame))
}

/// One [`ItemResult`] per sample, in the samples' order.
pub fn score_items(
    samples: &[Sample],
    predictions: &[PredictionLine],
    options: &EvalOptions,
) -> Result<Vec<ItemResult>, GroundingError> {
    if samples.is_empty() {
        return Err(GroundingError::NoSamples);
    }
    let by_id = index_predictions(samples, predictions)?;
    samples
        .par_iter()
        .map(|s| score_item(s, by_id.get(s.id.as_str()).map(|p| &p.answer), options))
        .collect()
}

/// Predictions by sample id, refusing duplicates and ids the data does not have.
fn index_predictions<'a>(
    samples: &[Sample],
    predictions: &'a [PredictionLine],
) -> Result<HashMap<&'a str, &'a PredictionLine>, GroundingError> {
    let mut sample_ids = std::collections::HashSet::with_capacity(samples.len());
    if let Some(dup) = samples.iter().find(|s| !sample_ids.insert(s.id.as_str())) {
        return Err(GroundingError::DuplicateSample { id: dup.id.clone() });
    }
    let mut by_id: HashMap<&str, &PredictionLine> = HashMap::with_capacity(predictions.len());
    for p in predictions {
        if !sample_ids.contains(p.id.as_str()) {
            return Err(GroundingError::UnknownSample {
                id: p.id.clone(),
                line: p.line,
            });
        }
        if let Some(first) = by_id.insert(&p.id, p) {
            return Err(GroundingError::DuplicatePrediction {
                id: p.id.clone(),
                first_line: first.line,
                line: p.line,
            });
        }
    }
    Ok(by_id)
}

fn score_item(
    sample: &Sample,
    prediction: Option<&RawAnswer>,
    options: &EvalOptions,
) -> Result<ItemResult, GroundingError> {
    let item = PixelItem::from_sample(sample, options.budget)?;
    let result = |correct, outcome, answer_frame, iou| ItemResult {
        id: sample.id.clone(),
        correct,
        outcome,
        answer_frame,
        iou,
        target_area: item.relative_target_area(),
    };
    let Some(raw) = prediction else {
        return Ok(result(false, Outcome::Missing, None, None));
    };
    Ok(
        match resolve::resolve(raw, item.frames, options.model_frame, options.detect_frame) {
            Resolved::Failure(reason) => result(false, Outcome::ParseFailure(reason), None, None),
            Resolved::Answer { answer, frame } => {
                let correct = hit::is_correct(&answer, &item.targets, sample.none);
                match answer {
                    Answer::Refusal => result(correct, Outcome::Refused, None, None),
                    Answer::Click { bbox, .. } => result(
                        correct,
                        Outcome::Clicked,
                        frame,
                        bbox.and_then(|b| item.best_iou(&b)),
                    ),
                }
            }
        },
    )
}

/// A sample's image sizes and its targets in original pixels.
pub struct PixelItem {
    pub frames: ImageFrames,
    pub targets: Vec<Shape>,
}

impl PixelItem {
    /// Checks what scoring relies on and converts the targets. Grounding benchmarks ask about one
    /// image: the first image is the one clicked on.
    pub fn from_sample(sample: &Sample, budget: PixelBudget) -> Result<Self, GroundingError> {
        let bad = |field: &str, problem: String| GroundingError::BadSample {
            id: sample.id.clone(),
            field: field.to_string(),
            problem,
        };
        let image = sample
            .images
            .first()
            .ok_or_else(|| bad("images", "empty".into()))?;
        let frames = ImageFrames::from_original(u64::from(image.width), u64::from(image.height), budget)
            .map_err(|e| bad("images[0]", format!("{}x{}: {e}", image.width, image.height)))?;
        match (sample.none, sample.targets.is_empty()) {
            (true, false) => {
                return Err(bad(
                    "targets",
                    "a refusal item (none) must have no targets".into(),
                ));
            }
            (false, true) => return Err(bad("targets", "empty on an item that is not a refusal".into())),
            _ => {}
        }
        let targets = sample
            .targets
            .iter()
            .enumerate()
            .map(|(i, t)| {
                to_pixels(&t.shape, &frames, sample.frame).map_err(|p| bad(&format!("targets[{i}]"), p))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { frames, targets })
    }

    /// The best IoU of `bbox` with a box target; `None` if no target is a box.
    fn best_iou(&self, bbox: &BBox) -> Option<f64> {
        self.targets
            .iter()
            .filter_map(|t| match t {
                Shape::Box(xyxy) => Some(BBox::from_xyxy(*xyxy).iou(bbox)),
                _ => None,
            })
            .reduce(f64::max)
    }

    /// Area of the first target as a share of the image (0 for a point target), `None` for a
    /// refusal item.
    pub fn relative_target_area(&self) -> Option<f64> {
        let area = match self.targets.first()? {
            Shape::Box(xyxy) => BBox::from_xyxy(*xyxy).area(),
            Shape::Point(_) => 0.0,
            Shape::Polygon(vertices) => hit::polygon_area(vertices),
        };
        let image = self.frames.original;
        Some(area / (image.width * image.height))
    }
}

/// A target shape converted from `frame` to original pixels, after checking it is usable. `Err` is
/// the problem in words, which the caller files under the target ([`GroundingError::BadSample`]):
/// a person fixes the data, no caller acts on which check failed.
fn to_pixels(shape: &Shape, frames: &ImageFrames, frame: Frame) -> Result<Shape, String> {
    let convert = |[x, y]: [f64; 2]| {
        let p = frames.convert_point(Point::new(x, y), frame, Frame::Pixel);
        [p.x, p.y]
    };
    let coords: Vec<f64> = match shape {
        Shape::Box(c) => c.to_vec(),
        Shape::Point(c) => c.to_vec(),
        Shape::Polygon(v) => v.iter().flatten().copied().collect(),
    };
    if coords.iter().any(|c| !c.is_finite()) {
        return Err(format!("{shape:?} has a coordinate that is not a finite number"));
    }
    Ok(match shape {
        Shape::Box([x1, y1, x2, y2]) if x1 > x2 || y1 > y2 => {
            return Err(format!("box {:?} has x1 > x2 or y1 > y2", [x1, y1, x2, y2]));
        }
        Shape::Box([x1, y1, x2, y2]) => {
            let ([a, b], [c, d]) = (convert([*x1, *y1]), convert([*x2, *y2]));
            Shape::Box([a, b, c, d])
        }
        Shape::Point(p) => Shape::Point(convert(*p)),
        Shape::Polygon(v) if v.len() < 3 => return Err(format!("polygon with {} vertices", v.len())),
        Shape::Polygon(v) => Shape::Polygon(v.iter().map(|p| convert(*p)).collect()),
    })
}
