//! The trainer's side of tool use (`[tools]`): prompts that offer the tools, rollouts
//! through [`ToolRollout`], what a trajectory tells the gated reward and the telemetry, and the
//! warm-up's reference trajectories that zoom before answering.
//!
//! Without tools the same path runs with an empty toolbox and one turn per sample, which is plain
//! generation (tested in groundrl-tensor), so there is one rollout path for every run.

use std::collections::BTreeMap;

use groundrl_core::data::Sample;
use groundrl_core::frame::{Frame, ImageFrames};
use groundrl_core::metrics::grounding::RawAnswer;
use groundrl_core::parse::{Answer, confidence_in, parse_completion};
use groundrl_core::prompt::answer::{reference_answer, reference_answer_in_view, reference_zoom_call};
use groundrl_core::prompt::tools::tool_instruction;
use groundrl_core::resize::PixelBudget;
use groundrl_core::reward::ToolUse;
use groundrl_core::telemetry::stats::target_size;
use groundrl_core::tool::answer::answer_in_full_view;
use groundrl_core::tool::{AnswerView, CallOutcome, ToolContext, Toolbox, View};
use groundrl_tensor::processor::{Encoded, Processor, ToolPrompt};
use groundrl_tensor::rollout::{Trajectory, TurnLimits};
use image::RgbImage;

use super::evaluation::pixel_boxes;
use crate::config::TrainConfig;

/// Confidence written before the zoom in a reference trajectory: below the gate's default tau
/// (0.7), so zooming is what the gate expects.
const REFERENCE_CONFIDENCE_BEFORE: f64 = 0.3;
/// Confidence written after a reference answer (above tau). These two only teach the format;
/// calibration is learned from the reward.
const REFERENCE_CONFIDENCE_AFTER: f64 = 0.9;

/// The tools of a run and how they are used.
#[derive(Debug)]
pub(super) struct ToolSetup {
    pub toolbox: Toolbox,
    /// The schemas and instruction added to every prompt; `None` without tools.
    pub prompt: Option<ToolPrompt>,
    pub limits: TurnLimits,
    answer_view: AnswerView,
    zoom_below: f64,
    zoom_context: f64,
}

impl ToolSetup {
    pub fn new(cfg: &TrainConfig) -> Self {
        let t = &cfg.tools;
        let budget = PixelBudget {
            min_pixels: cfg.model.min_pixels,
            max_pixels: cfg.model.max_pixels,
        };
        let toolbox = t.toolbox(budget);
        let max_new = cfg.rollout.max_new_tokens;
        let (prompt, limits) = if toolbox.is_empty() {
            let limits = TurnLimits {
                max_turns: 1,
                max_total_tokens: max_new as usize,
            };
            (None, limits)
        } else {
            let prompt = ToolPrompt {
                schemas: toolbox.schemas(),
                instruction: tool_instruction(t.answer_view, t.max_turns.saturating_sub(1)),
            };
            let limits = TurnLimits {
                max_turns: t.max_turns as usize,
                max_total_tokens: t.total_token_budget(max_new, cfg.model.max_pixels) as usize,
            };
            (Some(prompt), limits)
        };
        Self {
            toolbox,
            prompt,
            limits,
            answer_view: t.answer_view,
            zoom_below: t.warm_up_zoom_below,
            zoom_context: t.warm_up_zoom_context,
        }
    }

    pub fn is_on(&self) -> bool {
        self.prompt.is_some()
    }

    /// The image a trajectory's final answer is about.
    pub fn shown<'a>(&self, trajectory: &'a Trajectory, full: &'a View) -> &'a View {
        match self.answer_view {
            AnswerView::Full => full,
            AnswerView::Last => &trajectory.last_view,
        }
    }

    /// The warm-up's reference response for `sample`: its answer, or for a target smaller than
    /// `warm_up_zoom_below` a zoom call, the zoom's real reply (masked) and the answer about the
    /// view the answer is read in, with `\n<confidence>c</confidence>` after the answer when
    /// `writes_confidence`. The response's tokens with their generated flags.
    pub fn reference_response(
        &self,
        processor: &Processor,
        sample: &Sample,
        frames: ImageFrames,
        image: &RgbImage,
        model_frame: Frame,
        writes_confidence: bool,
    ) -> Result<(Encoded, Vec<bool>), String> {
        let full = View::full(frames);
        let eos = i64::from(processor.tokenizer.special_ids().eos);
        let mut response = Response::default();
        let mut view = full;
        if self.zooms_in_warm_up(sample, frames) {
            let call = reference_zoom_call(sample, frames, REFERENCE_CONFIDENCE_BEFORE, self.zoom_context)
                .map_err(|e| e.to_string())?;
            response.push(&tokens(processor, &call)?, true);
            let context = ToolContext {
                image,
                view: &full,
                model_frame,
            };
            let reply = self
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
            if self.answer_view == AnswerView::Last {
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
    fn zooms_in_warm_up(&self, sample: &Sample, frames: ImageFrames) -> bool {
        self.is_on()
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

/// The final answer as the grounding evaluation reads it: the completion itself when it is about
/// the full screenshot, else its first click re-expressed about the full screenshot.
pub(super) fn eval_answer(text: &str, shown: &View, full: &View, model_frame: Frame) -> RawAnswer {
    if shown.is_full() {
        return RawAnswer::Completion(text.to_string());
    }
    let Ok(parsed) = parse_completion(text) else {
        return RawAnswer::Completion(text.to_string());
    };
    let mapped = answer_in_full_view(&parsed, shown, full, model_frame);
    let frame = mapped.frame_hint.unwrap_or(model_frame);
    match (&mapped.answer, mapped.click_points().first()) {
        (Answer::Boxes(boxes), _) if !boxes.is_empty() => RawAnswer::Box {
            xyxy: boxes[0].coords,
            frame,
        },
        (_, Some(&xy)) => RawAnswer::Point { xy, frame },
        _ => RawAnswer::Completion(text.to_string()),
    }
}
