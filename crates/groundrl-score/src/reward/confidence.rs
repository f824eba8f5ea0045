//! Confidence calibration: a proper scoring rule on the confidence the model states.
//!
//! Seed 001 §2.2B saw 87-92% confidence on wrong answers, and Arc Vision's "confidence" was a keyword
//! count the model could game. Here the confidence is the model's own (`<confidence>0.8</confidence>`
//! or similar, parsed), and `correct` (0 or 1) comes from another component and a threshold:
//! - Brier (default): `-(c - correct)^2`, in [-1, 0];
//! - log: `ln(c)` if correct else `ln(1 - c)`, the probability given to what happened floored at
//!   1e-6 so a certain miss costs ln 1e-6 (about -13.8) rather than -inf; in [ln 1e-6, 0].
//!
//! Both are maximized in expectation by stating the true probability of being right. No stated
//! confidence scores `missing`, by default the rule's score at `c = 0.5` (-0.25 Brier, -ln 2 log):
//! stating a confidence then pays only when it is better calibrated than a coin flip, and leaving it
//! out is neither free (0 would be a perfect score) nor a catastrophe.

use serde::Deserialize;

/// Clamp of the log rule, so a confident miss costs a finite amount.
const LOG_EPSILON: f64 = 1e-6;

/// Which proper scoring rule is used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScoringRule {
    #[default]
    Brier,
    Log,
}

/// Parameters of the calibration reward.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfidenceParams {
    /// The component whose value decides correctness.
    pub correct_from: String,
    /// Correct iff that component's value is at least this.
    pub correct_threshold: f64,
    #[serde(default)]
    pub rule: ScoringRule,
    /// Score of a completion that states no confidence (default: the rule at `c = 0.5`).
    #[serde(default)]
    pub missing: Option<f64>,
}

/// The calibration reward of a stated confidence `c` in [0, 1].
pub fn calibration_reward(confidence: Option<f64>, correct: bool, p: &ConfidenceParams) -> f64 {
    match confidence {
        Some(c) => score(p.rule, c.clamp(0.0, 1.0), correct),
        None => p.missing.unwrap_or_else(|| score(p.rule, 0.5, correct)),
    }
}

fn score(rule: ScoringRule, c: f64, correct: bool) -> f64 {
    let y = if correct { 1.0 } else { 0.0 };
    match rule {
        ScoringRule::Brier => -(c - y) * (c - y),
        ScoringRule::Log => {
            let p_outcome = if correct { c } else { 1.0 - c };
            p_outcome.max(LOG_EPSILON).ln()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(rule: ScoringRule) -> ConfidenceParams {
        ConfidenceParams {
            correct_from: "iou".into(),
            correct_threshold: 0.5,
            rule,
            missing: None,
        }
    }

    #[test]
    fn brier_hand_computed() {
        let p = params(ScoringRule::Brier);
        assert_eq!(calibration_reward(Some(0.9), false, &p), -0.81);
        assert_eq!(calibration_reward(Some(0.75), true, &p), -0.0625);
        assert_eq!(calibration_reward(Some(1.0), true, &p), 0.0);
        assert_eq!(calibration_reward(None, true, &p), -0.25);
        let fixed = ConfidenceParams {
            missing: Some(-1.0),
            ..params(ScoringRule::Brier)
        };
        assert_eq!(calibration_reward(None, true, &fixed), -1.0);
    }

    #[test]
    fn log_hand_computed() {
        let p = params(ScoringRule::Log);
        assert_eq!(calibration_reward(Some(0.5), true, &p), 0.5f64.ln());
        assert_eq!(calibration_reward(Some(0.75), false, &p), 0.25f64.ln());
        // a certain miss is clamped, not -inf
        assert_eq!(calibration_reward(Some(1.0), false, &p), LOG_EPSILON.ln());
        assert_eq!(calibration_reward(None, false, &p), 0.5f64.ln());
    }
}
