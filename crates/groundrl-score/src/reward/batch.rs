//! Scoring records against a spec: one record ([`score_one`]) or a batch in parallel
//! ([`score_batch`]).
//!
//! Each record is parsed once; its target and answer are brought into one frame
//! ([`super::input`]); then every component is computed (sources, `correct_from` and `task_from`,
//! first) and the total is `Σ weight * value`. A record whose fields are wrong is an `Err` naming
//! the field; an answer that cannot be parsed or placed in a frame is not an error: it scores the
//! floor of the geometric rewards and is reported in [`ParseInfo`].
//!
//! A tool-using rollout is scored on its final answer (its coordinates mapped to the full view:
//! `groundrl_core::tool::answer::answer_in_full_view`) with its [`ToolUse`]; calibration scores the
//! confidence stated in the scored text, which is the rollout's final one.

use rayon::prelude::*;
use serde::Serialize;

use super::gated;
use super::input::{InputError, RewardInput, ScoringFrame, ToolUse};
use super::spec::{Kind, RewardSpec};
use super::{Prediction, Scene, box_overlap, confidence, detection, format, length, point, repetition};
use crate::frame::Frame;
use crate::parse::{ParseFailure, Parsed, confidence_in, parse_completion};

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
    /// Boxes (or points) past the spec's `max_boxes`, not scored but counted; written only when
    /// there are some.
    #[serde(skip_serializing_if = "is_zero")]
    pub excess_boxes: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
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
    check_num_tokens(spec, input)?;
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
        excess_boxes: parse.excess_boxes,
    };
    // Read whether or not the answer parsed, so a confidence counts the same either way: otherwise
    // appending a `<tool_call>` block (which the parser takes as the answer) to an unreadable answer
    // would change its score.
    let stated = parsed.map_or_else(|_| confidence_in(&input.completion), |p| p.confidence);
    let record = Record {
        scene,
        parsed,
        completion: &input.completion,
        num_tokens: input.num_tokens.unwrap_or(0),
        stated,
        tool_use: input
            .tool_use
            .clone()
            .unwrap_or_else(|| ToolUse::without_tools(stated)),
    };
    let components = evaluate(spec, &record);
    let total = weighted_total(spec, &components)?;
    Ok(Scored {
        total,
        components,
        parse,
    })
}

/// `Σ weight * value`; a total that is not finite (a weight so large that a term or the sum
/// overflows) is an error naming the component, never a `null` reward.
fn weighted_total(spec: &RewardSpec, values: &[f64]) -> Result<f64, InputError> {
    let terms = || spec.components().iter().zip(values);
    let total: f64 = terms().map(|(c, v)| c.weight * v).sum();
    if total.is_finite() {
        return Ok(total);
    }
    let detail = match terms().find(|(c, v)| !(c.weight * **v).is_finite()) {
        Some((c, v)) => format!("component `{}` gives {} * {v}", c.name, c.weight),
        None => "the terms overflow when added".to_string(),
    };
    Err(InputError::new(
        "reward",
        format!("the total is {total}, not a finite number: {detail}"),
    ))
}

/// Refuses a record without `num_tokens` when a component counts tokens.
fn check_num_tokens(spec: &RewardSpec, input: &RewardInput) -> Result<(), InputError> {
    match (input.num_tokens, spec.needs_num_tokens()) {
        (None, Some(name)) => Err(InputError::new(
            "num_tokens",
            format!("missing; component `{name}` needs it"),
        )),
        _ => Ok(()),
    }
}

/// Places the parsed answer in the scoring frame. A parse or frame failure gives no prediction
/// and is reported; an answer in another frame than a target without `image_size` is a bad record.
fn read_answer(
    spec: &RewardSpec,
    scoring: &ScoringFrame,
    parsed: Result<&Parsed, &ParseFailure>,
    target_frame: Frame,
) -> Result<(Option<Prediction>, ParseInfo), InputError> {
    let failed = |error: String| {
        let info = ParseInfo {
            ok: false,
            error: Some(error),
            frame: None,
            excess_boxes: 0,
        };
        Ok((None, info))
    };
    let parsed = match parsed {
        Ok(p) => p,
        Err(failure) => return failed(failure.to_string()),
    };
    let frame = match scoring.answer_frame(parsed, spec.model_frame, spec.detect_frame) {
        Ok(frame) => frame,
        Err(why) => return failed(why.to_string()),
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
    let mut prediction = scoring.prediction(parsed, frame.unwrap_or(scoring.frame));
    let info = ParseInfo {
        ok: true,
        error: None,
        frame,
        excess_boxes: prediction.truncate(spec.max_boxes),
    };
    Ok((Some(prediction), info))
}

/// What components of one record look at.
struct Record<'a> {
    scene: Scene<'a>,
    parsed: Result<&'a Parsed, &'a ParseFailure>,
    completion: &'a str,
    /// The record's `num_tokens` (0 where absent and no component needs it).
    num_tokens: u64,
    /// The confidence the completion states, with or without a readable answer.
    stated: Option<f64>,
    /// The record's `tool_use`, or no call with the stated confidence.
    tool_use: ToolUse,
}

/// Every component's value, in spec order, computing sources (`correct_from`, `task_from`) first.
fn evaluate(spec: &RewardSpec, record: &Record) -> Vec<f64> {
    let mut values = vec![0.0; spec.components().len()];
    for &i in spec.eval_order() {
        // The spec orders every source before its users.
        let source = spec.source(i).map(|j| values[j]);
        values[i] = component_value(&spec.components()[i].kind, record, source);
    }
    values
}

/// One component's value; `source` is the value of the component it reads, if it reads one.
fn component_value(kind: &Kind, r: &Record, source: Option<f64>) -> f64 {
    let is_correct = |threshold: f64| source.is_some_and(|v| v >= threshold);
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
                length::LengthUnit::Tokens => r.num_tokens,
                length::LengthUnit::Words => r.completion.split_whitespace().count() as u64,
            };
            length::cosine_length(l, is_correct(p.correct_threshold), p)
        }
        Kind::Repetition(p) => repetition::repetition_penalty(r.completion, scene.prediction, p),
        Kind::Format(p) => format::format_reward(r.parsed, p),
        Kind::Confidence(p) => confidence::calibration_reward(r.stated, is_correct(p.correct_threshold), p),
        Kind::ToolGain(_) => gated::tool_reward(&r.tool_use, source.unwrap_or(0.0)),
        Kind::Gate(p) => gated::gate_reward(&r.tool_use, p),
    }
}
