//! Completions scored against their samples: the reward spec's total and components, the pass/fail
//! rule, and the telemetry record of each completion.

use groundrl_core::data::Sample;
use groundrl_core::parse::parse_completion;
use groundrl_core::reward::input::{RewardInput, Target};
use groundrl_core::reward::spec::Kind;
use groundrl_core::reward::{RewardSpec, score_parsed};
use groundrl_core::telemetry::CompletionRecord;

use crate::config::RewardConfig;

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
    pub text: &'a str,
    pub tokens: usize,
    pub truncated: bool,
}

impl Scorer {
    pub fn new(config: &RewardConfig) -> Result<Self, String> {
        let spec = config.load_spec().map_err(|e| e.to_string())?;
        let position = |name: &str| spec.components().iter().position(|c| c.name == name);
        let correct_from = match config.correct_component.as_str() {
            "" => None,
            name => Some(position(name).ok_or_else(|| {
                format!("reward.correct_component: no component named `{name}` in the reward spec")
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

    /// Scores one completion. A sample whose target cannot be scored is an error naming it.
    pub fn score(&self, s: &Scoring) -> Result<CompletionRecord, String> {
        let target =
            Target::from_sample(s.sample, s.resized).map_err(|e| format!("sample {}: {e}", s.sample.id))?;
        let input = RewardInput {
            completion: s.text.to_string(),
            target,
            num_tokens: Some(s.tokens as u64),
            tool_use: None,
        };
        let parsed = parse_completion(s.text);
        let scored = score_parsed(&self.spec, &input, parsed.as_ref())
            .map_err(|e| format!("sample {}: {e}", s.sample.id))?;
        let judged = self.correct_from.map_or(scored.total, |i| scored.components[i]);
        let confidence = parsed.ok().and_then(|p| p.confidence);
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
            confidence,
            // A completion without tool calls: its one confidence is stated before any call.
            confidence_before: confidence,
            components: scored.components,
            tool_calls: 0,
            tool_calls_ok: 0,
            tool_call_failures: Default::default(),
            target_size: None,
        })
    }
}
