//! The scorer: a completion scored against its sample by the reward spec (its total and components),
//! judged by the pass/fail rule, and written as its telemetry record. The trainer's scoring phase
//! (`trainer/scoring.rs`) and `groundrl rollout` score through it.

use std::collections::BTreeMap;

use groundrl_core::telemetry::CompletionRecord;
use groundrl_core::tool::View;
use groundrl_core::tool::answer::answer_in_full_view;
use groundrl_score::data::Sample;
use groundrl_score::parse::{confidence_in, parse_completion};
use groundrl_score::reward::input::{InputError, RewardInput, Target};
use groundrl_score::reward::spec::Kind;
use groundrl_score::reward::{RewardSpec, ToolUse, score_parsed};

use crate::config::{ConfigError, RewardConfig};

/// Why a [`Scorer`] could not be made from a `[reward]` config.
#[derive(Debug, thiserror::Error)]
pub enum ScorerError {
    /// The reward spec could not be read or is not valid.
    #[error(transparent)]
    Spec(#[from] ConfigError),
    /// `reward.correct_component` names no component of the spec.
    #[error("reward.correct_component: no component named `{name}` in the reward spec")]
    UnknownComponent { name: String },
}

/// Why a completion could not be scored: its sample's target cannot be (a target the reward spec
/// cannot read, a missing image size). The completion's text never makes it fail.
#[derive(Debug, thiserror::Error)]
#[error("sample {sample}: {error}")]
pub struct ScoreError {
    /// The sample's id.
    pub sample: String,
    pub error: InputError,
}

/// The reward spec with the config's rule for "correct".
#[derive(Debug)]
pub struct Scorer {
    pub spec: RewardSpec,
    /// The component the pass/fail rule reads (`None`: the total reward).
    correct_from: Option<usize>,
    threshold: f64,
    /// The first IoU component, reported as the completion's IoU.
    iou_from: Option<usize>,
}

/// One completion of one sample, as the trainer saw it.
pub struct Scoring<'a> {
    pub sample: &'a Sample,
    /// The resized image size `[width, height]` the model saw.
    pub resized: Option<[u64; 2]>,
    /// The prompt group (GRPO compares the completions of one prompt).
    pub group: usize,
    /// The final answer's text (the last turn of a tool-using trajectory).
    pub text: &'a str,
    /// Tokens the model generated (tool turns excluded), for length rewards.
    pub tokens: usize,
    pub truncated: bool,
    /// The target's size as a share of the image side (telemetry only).
    pub target_size: Option<f64>,
    /// How the completion used tools; `None` for a completion of a run without tools.
    pub tools: Option<ToolScoring<'a>>,
}

/// What a tool-using trajectory adds to its final answer.
pub struct ToolScoring<'a> {
    pub tool_use: ToolUse,
    /// Calls that did not run cleanly, by outcome name (`malformed`, `unknown_tool`, ...).
    pub failures: BTreeMap<String, u32>,
    /// The image the answer's coordinates are about (the last zoom, with `answer_view = "last"`).
    pub shown: &'a View,
    /// The prompt's full screenshot.
    pub full: &'a View,
}

impl Scorer {
    pub fn new(config: &RewardConfig) -> Result<Self, ScorerError> {
        let spec = config.load_spec()?;
        let position = |name: &str| spec.components().iter().position(|c| c.name == name);
        let correct_from = match config.correct_component.as_str() {
            "" => None,
            name => Some(position(name).ok_or_else(|| ScorerError::UnknownComponent {
                name: name.to_string(),
            })?),
        };
        let iou_from = spec
            .components()
            .iter()
            .position(|c| matches!(c.kind, Kind::Iou(_)));
        Ok(Self {
            spec,
            correct_from,
            threshold: config.correct_threshold,
            iou_from,
        })
    }

    /// The component names in the spec's order.
    pub fn component_names(&self) -> Vec<String> {
        self.spec.components().iter().map(|c| c.name.clone()).collect()
    }

    /// Whether a component reads the confidence the model states (`confidence` or `gate`), so
    /// reference answers must write one.
    pub fn reads_confidence(&self) -> bool {
        self.spec
            .components()
            .iter()
            .any(|c| matches!(c.kind, Kind::Confidence(_) | Kind::Gate(_)))
    }

    /// Scores one completion. A sample whose target cannot be scored is an error naming it.
    pub fn score(&self, s: &Scoring) -> Result<CompletionRecord, ScoreError> {
        let unscorable = |error| ScoreError {
            sample: s.sample.id.clone(),
            error,
        };
        let target = Target::from_sample(s.sample, s.resized).map_err(unscorable)?;
        let confidence = confidence_in(s.text);
        let tool_use = s
            .tools
            .as_ref()
            .map_or_else(|| ToolUse::without_tools(confidence), |t| t.tool_use.clone());
        let input = RewardInput {
            completion: s.text.to_string(),
            target,
            num_tokens: Some(s.tokens as u64),
            tool_use: Some(tool_use.clone()),
        };
        let parsed = parse_completion(s.text).map(|p| match &s.tools {
            // An answer about a zoomed view, re-expressed about the full screenshot the target is in.
            Some(t) if !t.shown.is_full() => answer_in_full_view(&p, t.shown, t.full, self.spec.model_frame),
            _ => p,
        });
        let scored = score_parsed(&self.spec, &input, parsed.as_ref()).map_err(unscorable)?;
        let judged = self.correct_from.map_or(scored.total, |i| scored.components[i]);
        Ok(CompletionRecord {
            group: s.group,
            source: s.sample.source.clone(),
            reward: scored.total,
            correct: Some(judged >= self.threshold),
            iou: self.iou_from.map(|i| scored.components[i]),
            response_tokens: s.tokens,
            truncated: s.truncated,
            parse_ok: scored.parse.ok,
            frame: scored.parse.frame,
            excess_boxes: scored.parse.excess_boxes,
            confidence,
            confidence_before: tool_use.confidence_before,
            components: scored.components,
            tool_calls: tool_use.calls,
            tool_calls_ok: tool_use.successful,
            tool_call_failures: s.tools.as_ref().map(|t| t.failures.clone()).unwrap_or_default(),
            target_size: s.target_size,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A click task on a 1120 x 560 screenshot whose target box is (100, 100)-(200, 150), scored in
    /// its original pixels by the click rule with at most one scored point.
    fn scorer_and_sample() -> (Scorer, Sample) {
        let spec: toml::Table = toml::from_str(
            "model_frame = \"pixel\"\nmax_boxes = 1\n[components.click]\nkind = \"point_in_box\"\nweight = 1.0",
        )
        .unwrap();
        let config = RewardConfig {
            inline: spec,
            correct_component: "click".into(),
            ..RewardConfig::default()
        };
        let sample: Sample = serde_json::from_value(serde_json::json!({
            "id": "s0", "source": "synth", "task": "point_grounding",
            "images": [{"path": "a.png", "width": 1120, "height": 560}],
            "instruction": "click it",
            "targets": [{"shape": {"type": "box", "coords": [100.0, 100.0, 200.0, 150.0]}}],
            "frame": "pixel"
        }))
        .unwrap();
        (Scorer::new(&config).unwrap(), sample)
    }

    fn record(scorer: &Scorer, sample: &Sample, text: &str) -> CompletionRecord {
        let s = Scoring {
            sample,
            resized: Some([1120, 560]),
            group: 0,
            text,
            tokens: 12,
            truncated: false,
            target_size: None,
            tools: None,
        };
        scorer.score(&s).unwrap()
    }

    #[test]
    fn points_past_max_boxes_are_counted_in_the_record_not_scored() {
        let (scorer, sample) = scorer_and_sample();
        let one = record(&scorer, &sample, "(150, 120)");
        assert_eq!((one.excess_boxes, one.correct), (0, Some(true)));
        // Three points where the spec scores one: the first lands, the two others are counted.
        let three = record(&scorer, &sample, "[(150, 120), (600, 300), (700, 400)]");
        assert_eq!((three.excess_boxes, three.correct), (2, Some(true)));
    }
}
