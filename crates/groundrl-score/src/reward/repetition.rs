//! N-gram repetition penalty (Yeo et al. 2025, arXiv 2502.03373), with VLM-R1's detection variant.
//!
//! Text mode: `words = lower(completion).split()`; `penalty = (1 - unique_ngrams / total_ngrams) *
//! max_penalty`, `max_penalty <= 0`; 0 when there are fewer than `n` words.
//!
//! Items mode (VLM-R1 `repetition_reward` on detection JSON): each predicted box, coordinates and
//! label together, is one token, and 1-grams are counted, so listing the same box twice is penalized
//! while different boxes are not; 0 when there are no boxes. Unlike VLM-R1 an unlabeled box counts
//! too (label `""`), and coordinates compare as numbers (`10` equals `10.0`).
//!
//! Auto mode (VLM-R1's behaviour): items when the answer has boxes, text otherwise.
//! Seed 004: the penalty raised precision and cost recall.

use std::collections::HashSet;

use serde::Deserialize;

use super::Prediction;

/// Which tokens the n-grams are made of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RepetitionMode {
    Text,
    Items,
    #[default]
    Auto,
}

/// Parameters of the repetition penalty; defaults are VLM-R1's.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RepetitionParams {
    pub mode: RepetitionMode,
    /// `n` of text mode (items mode always counts 1-grams).
    pub ngram: usize,
    /// The penalty of a completion made of one n-gram repeated forever; must be <= 0.
    pub max_penalty: f64,
}

impl Default for RepetitionParams {
    fn default() -> Self {
        Self {
            mode: RepetitionMode::Auto,
            ngram: 6,
            max_penalty: -1.0,
        }
    }
}

/// The repetition penalty of one completion, in `[max_penalty, 0]`.
pub fn repetition_penalty(completion: &str, prediction: Option<&Prediction>, p: &RepetitionParams) -> f64 {
    let boxes = prediction.map_or(&[][..], |pred| &pred.boxes[..]);
    let items = match p.mode {
        RepetitionMode::Text => false,
        RepetitionMode::Items => true,
        RepetitionMode::Auto => !boxes.is_empty(),
    };
    let (unique, total) = if items {
        let keys: HashSet<_> = boxes
            .iter()
            .map(|b| (b.bbox.xyxy().map(f64::to_bits), &b.label))
            .collect();
        (keys.len(), boxes.len())
    } else {
        text_ngrams(completion, p.ngram)
    };
    if unique == total {
        // also covers `total == 0`; and avoids writing `-0.0` for "no repetition"
        return 0.0;
    }
    (1.0 - unique as f64 / total as f64) * p.max_penalty
}

/// Distinct and total word n-grams of lower-cased text.
fn text_ngrams(text: &str, n: usize) -> (usize, usize) {
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower.split_whitespace().collect();
    if n == 0 || words.len() < n {
        return (0, 0);
    }
    let unique: HashSet<&[&str]> = words.windows(n).collect();
    (unique.len(), words.len() - n + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::{BBox, LabeledBox};

    fn text(n: usize) -> RepetitionParams {
        RepetitionParams {
            mode: RepetitionMode::Text,
            ngram: n,
            max_penalty: -1.0,
        }
    }

    #[test]
    fn text_mode_hand_computed() {
        // 2-grams of "a b a b a": ab ba ab ba -> 2 unique of 4: penalty -0.5
        assert_eq!(repetition_penalty("a b a b a", None, &text(2)), -0.5);
        // case is folded: "A b a B a" is the same
        assert_eq!(repetition_penalty("A b a B a", None, &text(2)), -0.5);
        let none = repetition_penalty("a b c d", None, &text(2));
        assert_eq!((none, none.is_sign_positive()), (0.0, true), "0, not -0");
        // fewer words than n
        assert_eq!(repetition_penalty("a a a", None, &text(6)), 0.0);
        assert_eq!(repetition_penalty("", None, &text(1)), 0.0);
        let half = RepetitionParams {
            max_penalty: -0.5,
            ..text(1)
        };
        // 1-grams of "x x x x": 1 unique of 4: (1 - 1/4) * -0.5
        assert_eq!(repetition_penalty("x x x x", None, &half), -0.375);
    }

    #[test]
    fn items_mode_counts_duplicate_boxes() {
        let b = |x: f64, label: &str| LabeledBox {
            bbox: BBox::from_xyxy([x, 0.0, x + 10.0, 10.0]),
            label: label.into(),
        };
        let pred = Prediction {
            boxes: vec![b(0.0, "cat"), b(0.0, "cat"), b(0.0, "dog"), b(20.0, "cat")],
            ..Prediction::default()
        };
        let auto = RepetitionParams::default();
        // 3 distinct of 4: -0.25, whatever the text says
        assert_eq!(
            repetition_penalty("same same same same same same", Some(&pred), &auto),
            -0.25
        );
        // auto falls back to text when there are no boxes: 6-grams of 7 equal words, 1 of 2
        let none = Prediction::default();
        assert_eq!(repetition_penalty("w w w w w w w", Some(&none), &auto), -0.5);
        let items = RepetitionParams {
            mode: RepetitionMode::Items,
            ..auto
        };
        assert_eq!(repetition_penalty("w w w w w w w", Some(&none), &items), 0.0);
    }
}
