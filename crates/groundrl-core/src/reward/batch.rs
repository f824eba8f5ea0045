//! Scoring records against a spec: one record ([`score_one`]) or a batch in parallel
//! ([`score_batch`]).
//!
//! Each record is parsed once; its target and answer are brought into one frame
//! ([`super::input`]); then every component is computed (sources of `correct_from` first) and the
//! total is `Σ weight * value`. A record whose fields are wrong is an `Err` naming the field; an
//! answer that cannot be parsed or placed in a frame is not an error: it scores the floor of the
//! geometric rewards and is reported in [`ParseInfo`].

use rayon::prelude::*;
use serde::Serialize;

use super::input::{InputError, RewardInput, ScoringFrame};
use super::spec::{Kind, RewardSpec};
use super::{Prediction, Scene, box_overlap, confidence, detection, format, length, point, repetition};
use crate::frame::Frame;
use crate::parse::{ParseFailure, Parsed, parse_completion};

/// The scores of one record.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Scored {
    /// `Σ weight * value` over the components.
    pub total: f64,
    /// Each component's own (unweighted) value, in the spec's order.
    pub components: Vec<f64>,
    pub parse: ParseInfo,
}

/// How the answer was read: for the output's `"parse"` field and for counting failures.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ParseInfo {
    /// The answer was parsed and placed in a frame.
    pub ok: bool,
    /// Why not, when not.
    pub error: Option<String>,
    /// The frame the answer's coordinates were read in (none for an answer without coordinates).
    pub frame: Option<Frame>,
}

/// Scores every record, in parallel; results are in input order.
pub fn score_batch(spec: &RewardSpec, inputs: &[RewardInput]) -> Vec<Result<Scored, InputError>> {
    inputs.par_iter().map(|input| score_one(spec, input)).collect()
}

/// Scores one record.
pub fn score_one(spec: &RewardSpec, input: &RewardInput) -> Result<Scored, InputError> {
    let parsed = parse_completion(&input.completion);
    score_parsed(spec, input, parsed.as_ref())
}

/// Scores one record whose completion was already parsed (a trainer that parsed it for other
/// purposes need not parse it again).
pub fn score_parsed(
    spec: &RewardSpec,
    input: &RewardInput,
    parsed: Result<&Parsed, &ParseFailure>,
) -> Result<Scored, InputError> {
    let length = record_length(spec, input)?;
    let target = &input.target;
    let scoring = ScoringFrame::new(target, target.image_frames(spec.budget)?);
    let image_extent = scoring.image_extent();
    if let (None, Some(name)) = (image_extent, spec.needs_image_extent()) {
        return Err(InputError::new(
            "target.image_size",
            format!(
                "missing; component `{name}` needs the image size in the {} frame",
                scoring.frame
            ),
        ));
    }
    let (prediction, parse) = read_answer(spec, &scoring, parsed, target.frame)?;
    let targets = scoring.target_boxes(target);
    let scene = Scene {
        targets: &targets,
        target_none: target.none,
        prediction: prediction.as_ref(),
        image_extent,
    };
    let record = Record {
        scene,
        parsed,
        completion: &input.completion,
        length,
    };
    let components = evaluate(spec, &record);
    let total = spec
        .components()
        .iter()
        .zip(&components)
        .map(|(c, v)| c.weight * v)
        .sum();
    Ok(Scored {
        total,
        components,
        parse,
    })
}

/// `L` of length rewards: `num_tokens`, or a word count where a component asks for words.
fn record_length(spec: &RewardSpec, input: &RewardInput) -> Result<RecordLength, InputError> {
    if let (None, Some(name)) = (input.num_tokens, spec.needs_num_tokens()) {
        return Err(InputError::new(
            "num_tokens",
            format!("missing; component `{name}` needs it"),
        ));
    }
    Ok(RecordLength {
        tokens: input.num_tokens.unwrap_or(0),
        words: input.completion.split_whitespace().count() as u64,
    })
}

#[derive(Clone, Copy)]
struct RecordLength {
    tokens: u64,
    words: u64,
}

/// Places the parsed answer in the scoring frame. A parse or frame failure gives no prediction
/// and is reported; an answer in another frame than a target without `image_size` is a bad record.
fn read_answer(
    spec: &RewardSpec,
    scoring: &ScoringFrame,
    parsed: Result<&Parsed, &ParseFailure>,
    target_frame: Frame,
) -> Result<(Option<Prediction>, ParseInfo), InputError> {
    let failed = |error: String, frame| {
        let info = ParseInfo {
            ok: false,
            error: Some(error),
            frame,
        };
        Ok((None, info))
    };
    let parsed = match parsed {
        Ok(p) => p,
        Err(failure) => return failed(failure.to_string(), None),
    };
    let frame = match scoring.answer_frame(parsed, spec.model_frame, spec.detect_frame) {
        Ok(frame) => frame,
        Err(why) => return failed(why, None),
    };
    if let (None, Some(f)) = (scoring.frames, frame)
        && f != target_frame
    {
        return Err(InputError::new(
            "target.image_size",
            format!(
                "missing; needed to compare an answer in the {f} frame with a target in the {target_frame} frame"
            ),
        ));
    }
    let prediction = scoring.prediction(parsed, frame.unwrap_or(scoring.frame));
    let info = ParseInfo {
        ok: true,
        error: None,
        frame,
    };
    Ok((Some(prediction), info))
}

/// What components of one record look at.
struct Record<'a> {
    scene: Scene<'a>,
    parsed: Result<&'a Parsed, &'a ParseFailure>,
    completion: &'a str,
    length: RecordLength,
}

/// Every component's value, in spec order, computing `correct_from` sources first.
fn evaluate(spec: &RewardSpec, record: &Record) -> Vec<f64> {
    let mut values = vec![0.0; spec.components().len()];
    for &i in spec.eval_order() {
        // The spec orders every correctness source before its users.
        let is_correct = |threshold: f64| spec.correctness_source(i).is_some_and(|j| values[j] >= threshold);
        values[i] = component_value(&spec.components()[i].kind, record, is_correct);
    }
    values
}

fn component_value(kind: &Kind, r: &Record, is_correct: impl Fn(f64) -> bool) -> f64 {
    let scene = &r.scene;
    match kind {
        Kind::Iou(p) => box_overlap::iou_reward(scene, p.overlap),
        Kind::Giou(_) => box_overlap::giou_reward(scene),
        Kind::PointInBox(_) => point::point_in_box_reward(scene),
        Kind::GaussianPoint(_) => point::gaussian_point_reward(scene),
        Kind::GaussianCoverage(_) => point::gaussian_coverage_reward(scene),
        Kind::DenseDistance(_) => point::dense_distance_reward(scene),
        Kind::Ap(p) => detection::ap_reward(scene, p),
        Kind::WeightedSum(p) => detection::weighted_sum(scene, p),
        Kind::CosineLength(p) => {
            let l = match p.length_unit {
                length::LengthUnit::Tokens => r.length.tokens,
                length::LengthUnit::Words => r.length.words,
            };
            length::cosine_length(l, is_correct(p.correct_threshold), p)
        }
        Kind::Repetition(p) => repetition::repetition_penalty(r.completion, scene.prediction, p),
        Kind::Format(p) => format::format_reward(r.parsed, p),
        Kind::Confidence(p) => {
            let stated = r.parsed.ok().and_then(|parsed| parsed.confidence);
            confidence::calibration_reward(stated, is_correct(p.correct_threshold), p)
        }
    }
}
