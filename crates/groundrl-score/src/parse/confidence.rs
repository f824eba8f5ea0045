//! The confidence a model states about its answer, for calibration rewards (docs/design.md, "Rewards").

use super::cursor::Cursor;

/// The last confidence stated in `text`, in [0, 1].
///
/// Recognised: the word "confidence" (any case), then separators (`:`, `=`, `>`, quotes, `*`, spaces),
/// then a number, optionally followed by `%`: `<confidence>0.8</confidence>`, `"confidence": 80%`,
/// `Confidence: 0.85`. Percentages are divided by 100. Without `%` a number must already lie in
/// [0, 1]: "confidence: 8" could mean 8/10 or 8%, and guessing would corrupt a calibration reward.
/// The last statement counts, as the model's final word; if it is out of range there is none.
pub(super) fn stated_confidence(text: &str) -> Option<f64> {
    const WORD: &str = "confidence";
    let lower = text.to_ascii_lowercase();
    let last = lower
        .match_indices(WORD)
        .filter_map(|(start, _)| number_after(&text[start + WORD.len()..]))
        .last()?;
    (0.0..=1.0).contains(&last).then_some(last)
}

/// The number after the word, scaled if it is a percentage.
fn number_after(text: &str) -> Option<f64> {
    let text = text
        .trim_start_matches(|c: char| c.is_whitespace() || matches!(c, ':' | '=' | '>' | '"' | '\'' | '*'));
    let mut cursor = Cursor::new(text);
    let value = cursor.number()?;
    Some(if cursor.eat('%') { value / 100.0 } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_written_forms_are_read() {
        for (text, expected) in [
            ("<confidence>0.8</confidence>", 0.8),
            (r#"{"bbox_2d": [1,2,3,4], "confidence": 80%}"#, 0.8),
            ("Confidence: 85 %", 0.85),
            ("**CONFIDENCE** = 1", 1.0),
            ("'confidence': 0", 0.0),
        ] {
            assert_eq!(stated_confidence(text), Some(expected), "{text}");
        }
    }

    #[test]
    fn the_last_statement_counts() {
        assert_eq!(
            stated_confidence("confidence 0.2 ... revised confidence: 0.6"),
            Some(0.6)
        );
        assert_eq!(
            stated_confidence("my confidence is low. Confidence: 0.3"),
            Some(0.3)
        );
    }

    #[test]
    fn out_of_range_or_absent_gives_none() {
        for text in [
            "confidence: 85",
            "confidence: 120%",
            "confidence: -0.1",
            "I am confident",
            "",
            "confidence: high",
        ] {
            assert_eq!(stated_confidence(text), None, "{text}");
        }
        assert_eq!(stated_confidence("confidence 0.9, then confidence: 7"), None);
    }
}
