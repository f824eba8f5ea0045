//! The gated tool reward, after Arc Vision's (the example proposed to verl, examples/arc_vision/):
//! pay a model for zooming when it is unsure and the zoom helped, and penalise zooming for nothing.
//!
//! Arc Vision's total was `0.6 task + 0.3 tool + 0.1 gate`. Its "confidence" was a keyword count
//! and its tool count included any `<tool_call>` text, so writing tool-call text raised the reward
//! and the missed-opportunity penalty could never fire. Here
//! both inputs come from the rollout itself ([`ToolUse`]): the calls the engine saw and ran, and
//! the confidences the model stated (`<confidence>p</confidence>`, parsed):
//! - `confidence_before`: stated before the first tool call (for a completion without calls, the
//!   one it states);
//! - `confidence_after`: the last one stated.
//!
//! Two components:
//! - tool gain ([`tool_reward`]): `clamp((after - before) * task, 0, 1)` when at least one call
//!   succeeded and both confidences are stated, else 0. `task` is the value of another component
//!   (`task_from`: IoU for boxes, point-in-box for clicks), so a confidence gain pays only as much
//!   as the answer is right.
//! - gate ([`gate_reward`]): the sum of the penalties that fire (each a negative parameter):
//!   - unnecessary (-0.5): `before >= tau` and at least one call;
//!   - missed opportunity (-0.3): `before < tau` (a missing confidence counts as below) and no
//!     call succeeded;
//!   - ineffective (-0.2): at least one call and `after - before < min_gain` (0.05), a missing
//!     confidence counting as no gain;
//!   - excessive (-0.4): more than `max_calls` (2) calls.
//!
//! Why these exact conditions: each penalty can fire alone (unnecessary and missed opportunity
//! exclude each other: one is about a confident model, the other an unsure one); and a call that
//! did not succeed (malformed, unknown tool, refused, past the turn limit) can only add penalties:
//! it earns no tool gain, cannot lift missed opportunity, and counts towards unnecessary,
//! ineffective and excessive. So tool-call text that has no effect never raises the reward. A
//! `<tool_call>` block inside the final answer is not a call at all (the engine never ran it): the
//! parser reads it as the answer, which then usually scores nothing.

use serde::Deserialize;

use super::input::ToolUse;

/// The shipped reward spec for clicks with the zoom tool (the repository's
/// `configs/rewards/tool-gated.toml`): click 0.6, tool 0.3, gate 0.1, calibration 0.1. Embedded so
/// that `groundrl demo --tools` scores with exactly the spec tested here.
pub const TOOL_GATED_SPEC: &str = include_str!("../../../../configs/rewards/tool-gated.toml");

/// Parameters of the tool-gain reward (`kind = "tool_gain"`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolGainParams {
    /// The component whose value is the task score the gain is multiplied by.
    pub task_from: String,
}

/// Parameters of the gate (`kind = "gate"`); every key is optional, with Arc Vision's values.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GateParams {
    /// Confidence at or above which the model should answer without tools.
    pub tau: f64,
    /// Smallest confidence gain a call must bring not to be ineffective.
    pub min_gain: f64,
    /// Most calls allowed before the excessive penalty.
    pub max_calls: u32,
    pub unnecessary: f64,
    pub missed_opportunity: f64,
    pub ineffective: f64,
    pub excessive: f64,
}

impl Default for GateParams {
    fn default() -> Self {
        Self {
            tau: 0.7,
            min_gain: 0.05,
            max_calls: 2,
            unnecessary: -0.5,
            missed_opportunity: -0.3,
            ineffective: -0.2,
            excessive: -0.4,
        }
    }
}

impl GateParams {
    /// Ranges the types cannot express: `tau` in [0, 1], a finite `min_gain`, penalties <= 0. `Err`
    /// is the problem in words, which the spec files under the component
    /// ([`super::SpecError::Component`]).
    pub fn check(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.tau) {
            return Err(format!("tau must be in [0, 1], got {}", self.tau));
        }
        if !self.min_gain.is_finite() {
            return Err(format!("min_gain must be finite, got {}", self.min_gain));
        }
        let penalties = [
            ("unnecessary", self.unnecessary),
            ("missed_opportunity", self.missed_opportunity),
            ("ineffective", self.ineffective),
            ("excessive", self.excessive),
        ];
        match penalties.iter().find(|(_, v)| !(v.is_finite() && *v <= 0.0)) {
            Some((key, v)) => Err(format!("{key} is a penalty and must be <= 0, got {v}")),
            None => Ok(()),
        }
    }
}

/// Which gate penalties fire for one rollout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fired {
    pub unnecessary: bool,
    pub missed_opportunity: bool,
    pub ineffective: bool,
    pub excessive: bool,
}

/// The penalties that fire (see the module docs for the conditions).
pub fn fired(tool_use: &ToolUse, p: &GateParams) -> Fired {
    let called = tool_use.calls >= 1;
    let confident = tool_use.confidence_before.is_some_and(|c| c >= p.tau);
    Fired {
        unnecessary: confident && called,
        missed_opportunity: !confident && tool_use.successful == 0,
        ineffective: called && tool_use.gain().unwrap_or(0.0) < p.min_gain,
        excessive: tool_use.calls > p.max_calls,
    }
}

/// The gate: the sum of the penalties that fire, 0 when none does.
pub fn gate_reward(tool_use: &ToolUse, p: &GateParams) -> f64 {
    let f = fired(tool_use, p);
    [
        (f.unnecessary, p.unnecessary),
        (f.missed_opportunity, p.missed_opportunity),
        (f.ineffective, p.ineffective),
        (f.excessive, p.excessive),
    ]
    .iter()
    .filter(|(fires, _)| *fires)
    .map(|(_, penalty)| penalty)
    .sum()
}

/// The tool gain: `clamp((after - before) * task, 0, 1)` after at least one successful call with
/// both confidences stated, else 0.
pub fn tool_reward(tool_use: &ToolUse, task: f64) -> f64 {
    match tool_use.gain() {
        Some(gain) if tool_use.successful >= 1 => (gain * task).clamp(0.0, 1.0),
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::reward::{RewardInput, RewardSpec, score_one};

    fn used(calls: u32, successful: u32, before: Option<f64>, after: Option<f64>) -> ToolUse {
        ToolUse {
            calls,
            successful,
            confidence_before: before,
            confidence_after: after,
        }
    }

    const NONE: Fired = Fired {
        unnecessary: false,
        missed_opportunity: false,
        ineffective: false,
        excessive: false,
    };

    fn gate(t: &ToolUse) -> (Fired, f64) {
        let p = GateParams::default();
        (fired(t, &p), gate_reward(t, &p))
    }

    #[test]
    fn no_penalty_for_a_confident_answer_or_a_zoom_that_helped() {
        assert_eq!(gate(&ToolUse::without_tools(Some(0.7))), (NONE, 0.0));
        assert_eq!(gate(&used(1, 1, Some(0.25), Some(0.75))), (NONE, 0.0));
        // two calls are allowed
        assert_eq!(gate(&used(2, 1, Some(0.5), Some(0.6))), (NONE, 0.0));
    }

    #[test]
    fn each_penalty_fires_alone() {
        // confident (0.8 >= 0.7), zoomed anyway; the gain 0.1 is enough, one call
        let t = used(1, 1, Some(0.8), Some(0.9));
        assert_eq!(
            gate(&t),
            (
                Fired {
                    unnecessary: true,
                    ..NONE
                },
                -0.5
            )
        );
        // unsure (0.5), answered without zooming; a missing confidence counts as unsure
        let missed = Fired {
            missed_opportunity: true,
            ..NONE
        };
        assert_eq!(gate(&ToolUse::without_tools(Some(0.5))), (missed, -0.3));
        assert_eq!(gate(&ToolUse::without_tools(None)), (missed, -0.3));
        // unsure, zoomed, but the confidence moved by 0.02 < 0.05
        let t = used(1, 1, Some(0.5), Some(0.52));
        assert_eq!(
            gate(&t),
            (
                Fired {
                    ineffective: true,
                    ..NONE
                },
                -0.2
            )
        );
        // unsure, three calls (> 2), confidence up by 0.25
        let t = used(3, 2, Some(0.5), Some(0.75));
        assert_eq!(
            gate(&t),
            (
                Fired {
                    excessive: true,
                    ..NONE
                },
                -0.4
            )
        );
    }

    #[test]
    fn penalties_add_up() {
        // confident, three calls, no gain: unnecessary + ineffective + excessive
        let t = used(3, 3, Some(0.9), Some(0.9));
        let f = Fired {
            unnecessary: true,
            ineffective: true,
            excessive: true,
            ..NONE
        };
        let (got, total) = gate(&t);
        assert_eq!(got, f);
        assert!((total - -1.1).abs() < 1e-12, "{total}");
        // unsure, three calls that all failed: missed + ineffective + excessive
        let t = used(3, 0, Some(0.25), Some(0.25));
        let f = Fired {
            missed_opportunity: true,
            ineffective: true,
            excessive: true,
            ..NONE
        };
        let (got, total) = gate(&t);
        assert_eq!(got, f);
        assert!((total - -0.9).abs() < 1e-12, "{total}");
    }

    #[test]
    fn unnecessary_and_missed_opportunity_exclude_each_other() {
        // so "all four together" cannot happen: the gate's floor is -1.1 with the defaults
        for before in [None, Some(0.0), Some(0.69), Some(0.7), Some(1.0)] {
            for calls in 0..4 {
                for successful in 0..=calls {
                    let f = fired(
                        &used(calls, successful, before, Some(0.5)),
                        &GateParams::default(),
                    );
                    assert!(
                        !(f.unnecessary && f.missed_opportunity),
                        "{before:?} {calls} {successful}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_parameters_are_used() {
        let p = GateParams {
            tau: 0.9,
            min_gain: 0.5,
            max_calls: 0,
            unnecessary: -1.0,
            missed_opportunity: -2.0,
            ineffective: -4.0,
            excessive: -8.0,
        };
        // 0.8 < tau 0.9: not unnecessary; gain 0.125 < 0.5: ineffective; 1 call > 0: excessive
        assert_eq!(gate_reward(&used(1, 1, Some(0.8), Some(0.925)), &p), -12.0);
        assert_eq!(gate_reward(&ToolUse::without_tools(Some(0.8)), &p), -2.0);
    }

    #[test]
    fn tool_gain_needs_a_success_and_both_confidences() {
        // (0.75 - 0.25) * 1
        assert_eq!(tool_reward(&used(1, 1, Some(0.25), Some(0.75)), 1.0), 0.5);
        // times an IoU of 0.5
        assert_eq!(tool_reward(&used(2, 1, Some(0.25), Some(0.75)), 0.5), 0.25);
        // a wrong answer gains nothing, a confidence drop is clamped to 0
        assert_eq!(tool_reward(&used(1, 1, Some(0.25), Some(0.75)), 0.0), 0.0);
        assert_eq!(tool_reward(&used(1, 1, Some(0.75), Some(0.25)), 1.0), 0.0);
        // no successful call, or a confidence missing
        assert_eq!(tool_reward(&used(2, 0, Some(0.25), Some(0.75)), 1.0), 0.0);
        assert_eq!(tool_reward(&used(1, 1, None, Some(0.75)), 1.0), 0.0);
        assert_eq!(tool_reward(&used(1, 1, Some(0.25), None), 1.0), 0.0);
        assert_eq!(tool_reward(&ToolUse::without_tools(Some(0.75)), 1.0), 0.0);
        // a task score above 1 cannot push the gain past 1
        assert_eq!(tool_reward(&used(1, 1, Some(0.0), Some(1.0)), 2.0), 1.0);
    }

    #[test]
    fn tool_use_is_validated() {
        assert_eq!(
            used(1, 2, None, None).validate().unwrap_err().field,
            "tool_use.successful"
        );
        let e = used(1, 1, Some(1.5), None).validate().unwrap_err();
        assert_eq!(e.field, "tool_use.confidence_before");
        let e = used(1, 1, None, Some(-0.1)).validate().unwrap_err();
        assert_eq!(e.field, "tool_use.confidence_after");
        assert!(used(1, 1, Some(0.0), Some(1.0)).validate().is_ok());
    }

    #[test]
    fn gate_parameters_are_checked() {
        assert!(GateParams::default().check().is_ok());
        let bad = |p: GateParams| p.check().unwrap_err();
        let e = bad(GateParams {
            tau: 1.5,
            ..GateParams::default()
        });
        assert!(e.contains("tau"), "{e}");
        let e = bad(GateParams {
            excessive: 0.4,
            ..GateParams::default()
        });
        assert!(e.contains("excessive") && e.contains("<= 0"), "{e}");
        let e = bad(GateParams {
            min_gain: f64::NAN,
            ..GateParams::default()
        });
        assert!(e.contains("min_gain"), "{e}");
    }

    /// The shipped spec: click 0.6, tool 0.3, gate 0.1, calibration 0.1.
    fn shipped() -> RewardSpec {
        RewardSpec::from_toml(TOOL_GATED_SPEC).unwrap()
    }

    /// A 400x200 screenshot shown unresized, with the target at x 100..120, y 100..110.
    fn record(completion: &str, tool_use: Option<ToolUse>) -> RewardInput {
        let v = json!({"completion": completion, "target": {
            "boxes": [{"bbox": [100, 100, 120, 110]}], "frame": "pixel",
            "image_size": [400, 200], "resized_size": [400, 200]}});
        RewardInput {
            tool_use,
            ..RewardInput::from_json_object(v.as_object().unwrap()).unwrap()
        }
    }

    fn score(completion: &str, tool_use: Option<ToolUse>) -> (f64, Vec<f64>) {
        let s = score_one(&shipped(), &record(completion, tool_use)).unwrap();
        (s.total, s.components)
    }

    fn assert_scores((total, components): (f64, Vec<f64>), want_total: f64, want: [f64; 4]) {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        let all_close = components.iter().zip(want).all(|(&a, b)| close(a, b));
        assert!(all_close, "components {components:?}, expected {want:?}");
        assert!(close(total, want_total), "total {total}, expected {want_total}");
    }

    #[test]
    fn the_shipped_spec_scores_completions_end_to_end() {
        let spec = shipped();
        let names: Vec<_> = spec.components().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["click", "tool", "gate", "calibration"]);
        let hit = "(110, 105)\n<confidence>0.75</confidence>";
        // confident hit without tools: calibration -(0.75 - 1)^2
        assert_scores(score(hit, None), 0.6 - 0.1 * 0.0625, [1.0, 0.0, 0.0, -0.0625]);
        // unsure hit without tools: missed opportunity, calibration -(0.5 - 1)^2
        let unsure = "(110, 105)\n<confidence>0.5</confidence>";
        assert_scores(score(unsure, None), 0.6 - 0.03 - 0.025, [1.0, 0.0, -0.3, -0.25]);
        // zoomed at 0.25, then hit at 0.75: gain (0.75 - 0.25) * 1
        let zoomed = Some(used(1, 1, Some(0.25), Some(0.75)));
        assert_scores(
            score(hit, zoomed.clone()),
            0.6 + 0.15 - 0.1 * 0.0625,
            [1.0, 0.5, 0.0, -0.0625],
        );
        // zoomed, then missed at 0.75: no gain, calibration -(0.75)^2
        let miss = "(300, 50)\n<confidence>0.75</confidence>";
        assert_scores(score(miss, zoomed), -0.1 * 0.5625, [0.0, 0.0, 0.0, -0.5625]);
        // confident, zoomed three times for nothing: -0.5 - 0.2 - 0.4
        let t = Some(used(3, 3, Some(0.75), Some(0.75)));
        assert_scores(
            score(hit, t),
            0.6 - 0.11 - 0.1 * 0.0625,
            [1.0, 0.0, -1.1, -0.0625],
        );
        // no answer, no confidence: missed opportunity; calibration's missing score is Brier at 0.5
        assert_scores(
            score("I cannot see it", None),
            -0.03 - 0.025,
            [0.0, 0.0, -0.3, -0.25],
        );
        // no readable answer, but a confidence: it is scored all the same, -(0.25 - 0)^2
        let unsure = "I cannot see it\n<confidence>0.25</confidence>";
        assert_scores(score(unsure, None), -0.03 - 0.00625, [0.0, 0.0, -0.3, -0.0625]);
    }

    #[test]
    fn tool_call_text_without_effect_cannot_raise_the_reward() {
        let answers = ["(110, 105)", "(300, 50)", "[100, 100, 120, 110]", "no idea"];
        let confidences = [
            None,
            Some(0.0),
            Some(0.3),
            Some(0.69),
            Some(0.7),
            Some(0.95),
            Some(1.0),
        ];
        let befores = [None, Some(0.0), Some(0.3), Some(0.7), Some(1.0)];
        let zoom = "<tool_call>\n{\"name\": \"zoom\", \"arguments\": {\"bbox_2d\": [90, 90, 130, 120]}}\n</tool_call>";
        for answer in answers {
            for c in confidences {
                let text = match c {
                    Some(c) => format!("{answer}\n<confidence>{c}</confidence>"),
                    None => answer.to_string(),
                };
                let (plain, _) = score(&text, None);
                // calls that did not succeed, whatever confidences the rollout reports around them
                for calls in 1..=4 {
                    for before in befores {
                        for after in confidences {
                            let (with, _) = score(&text, Some(used(calls, 0, before, after)));
                            let case = format!("{text:?} {calls} {before:?} {after:?}");
                            assert!(with <= plain, "{case}: {with} > {plain}");
                        }
                    }
                }
                // one more failed call on top of a successful one
                for before in befores {
                    for calls in 1..=3 {
                        let (base, _) = score(&text, Some(used(calls, 1, before, c)));
                        let (more, _) = score(&text, Some(used(calls + 1, 1, before, c)));
                        assert!(more <= base, "{text:?} {calls} {before:?}: {more} > {base}");
                    }
                }
                // a call written into the final answer, never run
                for written in [format!("{text}\n{zoom}"), format!("{zoom}\n{text}")] {
                    let (with, _) = score(&written, None);
                    assert!(with <= plain, "{written:?}: {with} > {plain}");
                }
            }
        }
    }
}
