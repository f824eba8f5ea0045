//! The instruction added to a sample's user turn when tools are offered.
//!
//! The chat template's `<tools>` block declares what `zoom` takes; this text says when to use it,
//! how to state the confidences the gated reward reads (`groundrl_score::reward::gated`: one before any
//! call, one after the final answer) and which image the final answer's coordinates are about. It
//! is short because the tiny model's context is small.

use crate::tool::AnswerView;

/// The tool instruction for answers about `answer_view`, allowing `max_calls` zooms.
pub fn tool_instruction(answer_view: AnswerView, max_calls: u32) -> String {
    let zooms = if max_calls == 1 { "zoom" } else { "zooms" };
    let view = match answer_view {
        AnswerView::Full => "the full screenshot",
        AnswerView::Last => "the last image shown",
    };
    format!(
        "If the target is too small to see, call zoom on the region where it should be \
         (at most {max_calls} {zooms}). State your confidence that your answer is right, between 0 \
         and 1, as <confidence>p</confidence> before any zoom and again after your final answer. \
         After a zoom, answer in the coordinates of {view}."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_confidence_tag_the_limit_and_the_view() {
        let full = tool_instruction(AnswerView::Full, 2);
        assert!(full.contains("<confidence>p</confidence>"), "{full}");
        assert!(full.contains("at most 2 zooms"), "{full}");
        assert!(
            full.ends_with("answer in the coordinates of the full screenshot."),
            "{full}"
        );
        let last = tool_instruction(AnswerView::Last, 1);
        assert!(last.contains("at most 1 zoom)"), "{last}");
        assert!(
            last.ends_with("answer in the coordinates of the last image shown."),
            "{last}"
        );
        // short enough for a small context
        for text in [full, last] {
            let words = text.split_whitespace().count();
            assert!((40..=60).contains(&words), "{words} words: {text}");
        }
    }
}
