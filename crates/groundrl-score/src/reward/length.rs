//! Cosine length reward (Yeo et al. 2025, "Demystifying Long Chain-of-Thought Reasoning in LLMs",
//! arXiv 2502.03373, App. C.1).
//!
//! `r = lo + 0.5 * (hi - lo) * (1 + cos(pi * L / Lmax))`, falling from `hi` at `L = 0` to `lo` at
//! `L = Lmax`:
//! - correct answers: `(lo, hi) = (min_correct, max_correct)`, so shorter correct answers earn more;
//! - wrong answers: `(lo, hi) = (max_wrong, min_wrong)`, so longer wrong answers are penalized less
//!   (the model is pushed to keep thinking when it is wrong);
//! - `L + exceed_margin >= Lmax` gives `exceed_length` (the paper's code adds a 16-token margin
//!   against off-by-one truncation).
//!
//! Defaults are the paper's: min_wrong -10, max_wrong 0, min_correct 1, max_correct 2, exceed -10.
//! Correctness comes from another component of the spec and a threshold. VLM-R1's version hard-codes
//! `acc = 1` and so always takes the correct branch; here both branches are live.

use serde::Deserialize;

/// What `L` counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LengthUnit {
    /// The record's `num_tokens` (required).
    #[default]
    Tokens,
    /// Whitespace-separated words of the completion: only when asked for, as an approximation for
    /// records without token counts.
    Words,
}

/// Parameters of the cosine length reward.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CosineLengthParams {
    /// The component whose value decides correctness.
    pub correct_from: String,
    /// Correct iff that component's value is at least this.
    pub correct_threshold: f64,
    /// `Lmax`.
    pub max_length: u64,
    #[serde(default = "defaults::min_wrong")]
    pub min_wrong: f64,
    #[serde(default)]
    pub max_wrong: f64,
    #[serde(default = "defaults::min_correct")]
    pub min_correct: f64,
    #[serde(default = "defaults::max_correct")]
    pub max_correct: f64,
    #[serde(default = "defaults::exceed_length")]
    pub exceed_length: f64,
    #[serde(default = "defaults::exceed_margin")]
    pub exceed_margin: u64,
    #[serde(default)]
    pub length_unit: LengthUnit,
}

mod defaults {
    pub fn min_wrong() -> f64 {
        -10.0
    }
    pub fn min_correct() -> f64 {
        1.0
    }
    pub fn max_correct() -> f64 {
        2.0
    }
    pub fn exceed_length() -> f64 {
        -10.0
    }
    pub fn exceed_margin() -> u64 {
        16
    }
}

/// The cosine length reward of an answer of `length` units.
pub fn cosine_length(length: u64, correct: bool, p: &CosineLengthParams) -> f64 {
    if length + p.exceed_margin >= p.max_length {
        return p.exceed_length;
    }
    let (lo, hi) = if correct {
        (p.min_correct, p.max_correct)
    } else {
        (p.max_wrong, p.min_wrong)
    };
    let progress = length as f64 / p.max_length as f64;
    lo + 0.5 * (hi - lo) * (1.0 + (std::f64::consts::PI * progress).cos())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> CosineLengthParams {
        CosineLengthParams {
            correct_from: "iou".into(),
            correct_threshold: 0.5,
            max_length: 1000,
            min_wrong: -10.0,
            max_wrong: 0.0,
            min_correct: 1.0,
            max_correct: 2.0,
            exceed_length: -10.0,
            exceed_margin: 16,
            length_unit: LengthUnit::Tokens,
        }
    }

    #[test]
    fn correct_branch_prefers_short() {
        let p = params();
        assert_eq!(cosine_length(0, true, &p), 2.0);
        // L = Lmax/2: cos = 0 (to rounding), r = 1 + 0.5 = 1.5
        assert!((cosine_length(500, true, &p) - 1.5).abs() < 1e-12);
        // L = Lmax/3: cos(pi/3) = 0.5, r = 1 + 0.5 * 1.5 = 1.75
        let third = CosineLengthParams {
            max_length: 999,
            ..params()
        };
        assert!((cosine_length(333, true, &third) - 1.75).abs() < 1e-12);
    }

    #[test]
    fn wrong_branch_penalizes_short_more() {
        let p = params();
        assert_eq!(cosine_length(0, false, &p), -10.0);
        assert!((cosine_length(500, false, &p) - -5.0).abs() < 1e-12);
        // longer wrong answers are penalized less
        assert!(cosine_length(900, false, &p) > cosine_length(100, false, &p));
    }

    #[test]
    fn exceeding_within_the_margin() {
        let p = params();
        assert_eq!(cosine_length(984, true, &p), -10.0);
        assert!(cosine_length(983, true, &p) > 1.0);
        let no_margin = CosineLengthParams {
            exceed_margin: 0,
            ..params()
        };
        assert_eq!(cosine_length(1000, true, &no_margin), -10.0);
        assert_eq!(cosine_length(5000, false, &no_margin), -10.0);
    }
}
