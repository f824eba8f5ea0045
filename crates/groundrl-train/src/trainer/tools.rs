//! The trainer's side of tool use (`[tools]`): what a trajectory tells the gated reward and the
//! telemetry, and the warm-up's reference trajectories that zoom before answering. The prompts that
//! offer the tools and the rollouts through `ToolRollout` are [`Inference`]'s.
//!
//! Without tools the same path runs with an empty toolbox and one turn per sample, which is plain
//! generation (tested in groundrl-tensor), so there is one rollout path for every run.

use std::collections::BTreeMap;

use groundrl_core::prompt::answer::{reference_answer, reference_answer_in_view, reference_zoom_call};
use groundrl_core::telemetry::stats::target_size;
use groundrl_core::tool::{AnswerView, CallOutcome, ToolContext, View};
use groundrl_score::data::Sample;
use groundrl_score::frame::ImageFrames;
use groundrl_score::parse::confidence_in;
use groundrl_score::reward::ToolUse;
use groundrl_tensor::processor::{Encoded, Processor};
use groundrl_tensor::rollout::Trajectory;
use image::RgbImage;

use crate::config::TrainConfig;
use crate::inference::{Inference, pixel_boxes};

/// Confidence written before the zoom in a reference trajectory: below the gate's default tau
/// (0.7), so zooming is what the gate expects.
const REFERENCE_CONFIDENCE_BEFORE: f64 = 0.3;
/// Confidence written after a reference answer (above tau). These two only teach the format;
/// calibration is learned from the reward.
const REFERENCE_CONFIDENCE_AFTER: f64 = 0.9;

/// How the warm-up's reference trajectories use the run's tools (the tools themselves, their prompt
/// and turn limits are the run's [`Inference`]).
#[derive(Debug)]
pub(super) struct ToolSetup {
    zoom_below: f64,
    zoom_context: f64,
}

impl ToolSetup {
    pub fn new(cfg: &TrainConfig) -> Self {
        Self {
            zoom_below: cfg.tools.warm_up_zoom_below,
            zoom_context: cfg.tools.warm_up_zoom_context,
        }
    }

    /// The warm-up's reference response for `sample`: its answer, or for a target smaller than
    /// `warm_up_zoom_below` a zoom call, the zoom's real reply (masked) and the answer about the
    /// view the answer is read in, with `\n<confidence>c</confidence>` after the answer when
    /// `writes_confidence`. The response's tokens with their generated flags; `Err` is why the sample
    /// has none, a message printed as the warm-up skips the sample.
    pub fn reference_response(
        &self,
        inference: &Inference,
        processor: &Processor,
        sample: &Sample,
        frames: ImageFrames,
        image: &RgbImage,
        writes_confidence: bool,
    ) -> Result<(Encoded, Vec<bool>), String> {
        let full = View::full(frames);
        let eos = i64::from(processor.tokenizer.special_ids().eos);
        let mut response = Response::default();
        let mut view = full;
        if self.zooms_in_warm_up(inference, sample, frames) {
            let call = reference_zoom_call(sample, frames, REFERENCE_CONFIDENCE_BEFORE, self.zoom_context)
                .map_err(|e| e.to_string())?;
            response.push(&tokens(processor, &call)?, true);
            let context = ToolContext {
                image,
                view: &full,
                model_frame: inference.model_frame,
            };
            let reply = inference
                .toolbox
                .run(&call, &context)
                .ok_or_else(|| format!("sample {}: the reference zoom call was not read", sample.id))?;
            if reply.outcome != CallOutcome::Ok {
                return Err(format!(
                    "sample {}: reference zoom: {}",
                    sample.id, reply.output.text
                ));
            }
            let turn = processor.tool_turn(&reply.output).map_err(|e| e.to_string())?;
            response.push_tool_turn(&turn);
            if inference.answer_view == AnswerView::Last {
                view = reply.output.view.unwrap_or(full);
            }
        }
        // A confidence line only where the reward reads it: otherwise it would only lengthen every
        // answer the model must learn to end.
        let answer = if writes_confidence {
            reference_answer_in_view(sample, frames, &view, REFERENCE_CONFIDENCE_AFTER)
        } else {
            reference_answer(sample, frames)
        }
        .map_err(|e| e.to_string())?;
        let mut answer_tokens = tokens(processor, &answer)?;
        answer_tokens.push(eos);
        response.push(&answer_tokens, true);
        Ok((response.encoded, response.generated))
    }

    /// Whether the warm-up's reference trajectory for `sample` zooms first.
    fn zooms_in_warm_up(&self, inference: &Inference, sample: &Sample, frames: ImageFrames) -> bool {
        inference.tools_on()
            && self.zoom_below > 0.0
            && sample_target_size(sample, frames).is_some_and(|size| size < self.zoom_below)
    }
}

/// A response being assembled turn by turn.
#[derive(Default)]
struct Response {
    encoded: Encoded,
    generated: Vec<bool>,
}

impl Response {
    fn push(&mut self, ids: &[i64], generated: bool) {
        self.encoded.input_ids.extend_from_slice(ids);
        self.generated.extend(std::iter::repeat_n(generated, ids.len()));
    }

    /// Appends a tool turn (not generated), with its images.
    fn push_tool_turn(&mut self, turn: &Encoded) {
        self.generated
            .extend(std::iter::repeat_n(false, turn.input_ids.len()));
        self.encoded.append(turn);
    }
}

fn tokens(processor: &Processor, text: &str) -> Result<Vec<i64>, String> {
    Ok(processor
        .tokenizer
        .encode(text)
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(i64::from)
        .collect())
}

/// The sample's target size as a share of the image side (see `telemetry::stats::target_size`).
pub(super) fn sample_target_size(sample: &Sample, frames: ImageFrames) -> Option<f64> {
    let boxes = pixel_boxes(sample, frames);
    target_size(&boxes, frames.original.width, frames.original.height)
}

/// What the gated reward reads of a trajectory: its calls, and the confidences stated before the
/// first call and in the final answer.
pub(super) fn tool_use(trajectory: &Trajectory) -> ToolUse {
    let after = confidence_in(trajectory.final_text());
    let calls = trajectory.calls().count() as u32;
    if calls == 0 {
        return ToolUse::without_tools(after);
    }
    ToolUse {
        calls,
        successful: trajectory
            .calls()
            .filter(|c| c.outcome == CallOutcome::Ok)
            .count() as u32,
        confidence_before: trajectory.turns.first().and_then(|t| confidence_in(&t.text)),
        confidence_after: after,
    }
}

/// The trajectory's calls that did not run cleanly, counted by outcome name.
pub(super) fn call_failures(trajectory: &Trajectory) -> BTreeMap<String, u32> {
    let mut failures = BTreeMap::new();
    for call in trajectory.calls().filter(|c| c.outcome != CallOutcome::Ok) {
        *failures.entry(call.outcome.name().to_string()).or_insert(0) += 1;
    }
    failures
}
